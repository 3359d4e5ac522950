#pragma once
// The host facts every report carries (docs/SPEC.md §7): CPU (with its MHz and caches, as Google
// Benchmark's context names them), cores, kernel, isolated cpus, huge pages, THP, governor,
// memlock. Read from /proc and /sys; a fact the host does not expose is reported as
// "unavailable" (MHz 0, no caches) rather than guessed.

#include <nlohmann/json.hpp>

namespace ipcfloor {

// Setup path: reads files and allocates. Never fails; missing facts read "unavailable".
[[nodiscard]] nlohmann::json collect_host_info();

}  // namespace ipcfloor
