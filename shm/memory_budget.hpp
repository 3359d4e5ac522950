#pragma once
// Whether the host can back the memory a configuration asks for, decided before any of it is
// allocated.
//
// Why before: a memfd the host cannot back is not refused. posix_fallocate on shmem charges each
// page as it goes, and when the host's memory or the cgroup's limit runs out the kernel invokes
// the OOM killer instead of returning ENOMEM: the engine dies by SIGKILL mid-start, with no
// message and its runtime files left behind. So the sizes are added up first and compared with
// what the host says it can give:
//   - MemAvailable from /proc/meminfo (what can be allocated without swapping, page cache that
//     can be dropped included);
//   - the memory limit of every cgroup on this process's path (cgroup v2 memory.max, v1
//     memory.limit_in_bytes), less what that cgroup uses now that cannot be reclaimed
//     (usage minus inactive file cache).
// The verdict is a pure function of the sizes and those stated limits (check_memory_budget), so
// it is tested with limits injected; only read_host_memory() looks at the host.
//
// Setup path only. read_host_memory() reads /proc and /sys and allocates; the rest is pure.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace ipcfloor {

// One limit on what may still be allocated, and where the host states it.
struct MemoryLimit {
  std::uint64_t bytes = 0;  // what may still be allocated under it
  std::string source;       // names the file and its figures: for the refusal's sentence
};

struct HostMemory {
  std::optional<MemoryLimit> available;  // MemAvailable; empty when /proc/meminfo says nothing
  std::optional<MemoryLimit> cgroup;     // the tightest cgroup on this process's path; empty: none
};

// One part of what a configuration allocates, and the options that size it.
struct MemoryNeed {
  std::string what;     // "the data object", "5 lane objects of 1.0 GiB"
  std::uint64_t bytes = 0;
  std::string options;  // what to lower: "--capacity 200000000", "--lanes 4 or --bulk-bytes 1073741824"
};

// Pure. success when the needs together fit under every known limit (or none is known);
// otherwise resource, in one sentence naming the total, each need, the tightest limit with its
// source, and the options of the largest need.
[[nodiscard]] Expected<void> check_memory_budget(std::span<const MemoryNeed> needs, const HostMemory& host);

// One level of a cgroup path, as its files state it. `limit` is empty for no limit ("max", or
// v1's page-rounded LONG_MAX).
struct CgroupLevel {
  std::string path;  // the limit file, for the sentence
  std::optional<std::uint64_t> limit;
  std::uint64_t usage = 0;
  std::uint64_t inactive_file = 0;  // reclaimable page cache inside `usage`
};

// Pure: the tightest of `levels` (the least left under its limit), or empty when none has a limit.
[[nodiscard]] std::optional<MemoryLimit> tightest_cgroup_limit(std::span<const CgroupLevel> levels);

// Pure: MemAvailable of a /proc/meminfo text, in bytes; empty when the line is missing.
[[nodiscard]] std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo);

// "1.5 GiB", "512 MiB", "4.0 KiB", "100 bytes": for sentences. Pure.
[[nodiscard]] std::string bytes_text(std::uint64_t bytes);

// This host's limits for this process, read now.
[[nodiscard]] HostMemory read_host_memory();

}  // namespace ipcfloor
