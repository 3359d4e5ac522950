// The documents against the code they describe: numbers and examples a reader copies must be the
// ones the code uses. Each case reads a file of the repository and checks it against a constant
// or runs its example through the parser.

#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>

#include "kernel/combo_io.hpp"
#include "shm/layout.hpp"

using namespace ipcfloor;

namespace {

std::string read_doc(const std::string& relative) {
  std::ifstream in(std::string(IPCFLOOR_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), relative);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The body of the first fenced block that opens with "```<tag>" after `heading`.
std::string fenced_block(const std::string& text, const std::string& heading, const std::string& tag) {
  const auto section = text.find(heading);
  REQUIRE_MESSAGE(section != std::string::npos, heading);
  const std::string fence = "```" + tag + "\n";
  const auto open = text.find(fence, section);
  REQUIRE_MESSAGE(open != std::string::npos, fence);
  const auto body = open + fence.size();
  const auto close = text.find("```", body);
  REQUIRE(close != std::string::npos);
  return text.substr(body, close - body);
}

}  // namespace

TEST_CASE("PROTOCOL section 4 gives the hand-off's layout_version as the code has it") {
  const std::string protocol = read_doc("docs/PROTOCOL.md");
  const std::string request = fenced_block(protocol, "## 4. The hand-off", "");
  // "8   u32  layout_version 4": the number after the field's name on the request's line.
  const auto field = request.find("layout_version");
  REQUIRE_MESSAGE(field != std::string::npos, request);
  std::istringstream line(request.substr(field + std::string_view("layout_version").size()));
  unsigned version = 0;
  REQUIRE_MESSAGE(static_cast<bool>(line >> version), request);
  CHECK(version == kLayoutVersion);
}

TEST_CASE("the README's combo-file forms, CSV and JSON lines, parse into the same combos") {
  const std::string readme = read_doc("README.md");
  const std::string csv = fenced_block(readme, "### Combo files", "csv");
  const std::string jsonl = fenced_block(readme, "### Combo files", "jsonl");
  const auto from_csv = parse_combos(csv, "the README's CSV");
  const auto from_jsonl = parse_combos(jsonl, "the README's JSON lines");
  REQUIRE_MESSAGE(from_csv.has_value(), from_csv.error().message);
  REQUIRE_MESSAGE(from_jsonl.has_value(), from_jsonl.error().message);
  REQUIRE(from_csv->size() == 2);
  REQUIRE(from_jsonl->size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK_MESSAGE((*from_csv)[i].error.empty(), (*from_csv)[i].error);
    CHECK_MESSAGE((*from_jsonl)[i].error.empty(), (*from_jsonl)[i].error);
    CHECK((*from_csv)[i].combo.as_array() == (*from_jsonl)[i].combo.as_array());
  }
}

// The section of `text` that starts at `heading`, up to the next heading of the same level.
std::string section_of(const std::string& text, const std::string& heading) {
  const auto start = text.find(heading);
  REQUIRE_MESSAGE(start != std::string::npos, heading);
  const auto end = text.find("\n## ", start + heading.size());
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

TEST_CASE("OPERATIONS gives each wait mode's idle cost and the mode for a laptop; RESULTS has the run behind it") {
  const std::string idle = section_of(read_doc("docs/OPERATIONS.md"), "## Idle cost");
  for (const char* mode : {"`spin`", "`backoff`", "`block`"}) CHECK_MESSAGE(idle.find(mode) != std::string::npos, mode);
  CHECK(idle.find("On a laptop") != std::string::npos);
  CHECK(idle.find("run `--wait block`") != std::string::npos);
  const std::string run = section_of(read_doc("docs/RESULTS.md"), "## Idle cost per wait mode");
  CHECK(run.find("`tools/idle_cost") != std::string::npos);  // the command
  CHECK(run.find("model name") != std::string::npos);        // the CPU it ran on
  for (const char* mode : {"| spin |", "| backoff |", "| block |"}) CHECK_MESSAGE(run.find(mode) != std::string::npos, mode);
}

TEST_CASE("every setting OPERATIONS names under systemd is one the shipped ipcfloor@.service holds") {
  const std::string systemd = section_of(read_doc("docs/OPERATIONS.md"), "## Under systemd");
  const auto list = systemd.find("What the unit holds");
  REQUIRE(list != std::string::npos);
  const std::string section = systemd.substr(list);
  const std::string unit = read_doc("app/systemd/ipcfloor@.service.in");
  const std::regex setting("`([A-Z][A-Za-z]+=[^`$]*)`");
  std::size_t named = 0;
  for (auto it = std::sregex_iterator(section.begin(), section.end(), setting); it != std::sregex_iterator(); ++it) {
    const std::string text = (*it)[1].str();
    if (text.starts_with("IPCFLOOR_")) continue;  // an environment variable, not a unit setting
    ++named;
    CHECK_MESSAGE(unit.find("\n" + text) != std::string::npos, text);
  }
  CHECK(named >= 5);
}

TEST_CASE("the README tells where the installed plot script is and which python runs it") {
  const std::string readme = read_doc("README.md");
  CHECK(readme.find("PREFIX/share/ipcfloor/tools/plot_report.py REPORT.json OUT_DIR") != std::string::npos);
  CHECK(readme.find("`/usr/bin/python3` has with `python3-matplotlib`") != std::string::npos);
}
