#pragma once
// The combined report of `ipcfloor bench all`: report.json (every suite's JSON under one host
// block), report.md (tables a person reads in a minute) and the PNG plots that
// tools/plot_report.py draws from report.json.

#include <string>

#include <nlohmann/json.hpp>

namespace ipcfloor {

// Markdown for a combined report {"host":..., "command":..., "suites":{name: suite report}}.
// Pure: formats what the JSON holds and nothing else.
[[nodiscard]] std::string render_markdown(const nlohmann::json& combined);

}  // namespace ipcfloor
