// The documents against the code they describe: numbers and examples a reader copies must be the
// ones the code uses. Each case reads a file of the repository and checks it against a constant
// or runs its example through the parser.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/combo.hpp"
#include "common/exit_codes.hpp"
#include "data/combo_io.hpp"
#include "ipcfloor/strategy.h"
#include "kernel/cost.hpp"
#include "shm/frames.hpp"
#include "shm/layout.hpp"
#include "socket/socket_protocol.hpp"

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


// The text from `heading` up to the next heading of the same or a higher level ("## " or "# ").
std::string section(const std::string& text, const std::string& heading) {
  const auto start = text.find(heading);
  REQUIRE_MESSAGE(start != std::string::npos, heading);
  const auto level = heading.substr(0, heading.find(' ') + 1);  // "## "
  std::size_t end = start + heading.size();
  for (;;) {
    end = text.find("\n#", end);
    if (end == std::string::npos) return text.substr(start);
    // A deeper heading ("### ") belongs to the section; a "#" inside a fenced block is not at a line start.
    const auto hashes = text.find_first_not_of('#', end + 1) - (end + 1);
    if (hashes <= level.size() - 1) return text.substr(start, end - start);
    ++end;
  }
}

// 8000000000 -> "8,000,000,000", the way the docs print numbers.
std::string with_commas(std::uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// "62,000" -> 62000.
std::uint64_t without_commas(std::string text) {
  std::erase(text, ',');
  return std::stoull(text);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The rows of the first Markdown table after `heading` whose header row starts with `| first |`:
// each row's cells, trimmed, with backquotes removed.
std::vector<std::vector<std::string>> table_rows(const std::string& text, const std::string& heading,
                                                 const std::string& first) {
  const std::string body = section(text, heading);
  const auto head = body.find("| " + first + " |");
  REQUIRE_MESSAGE(head != std::string::npos, (heading + ": a table starting | " + first + " |"));
  std::vector<std::vector<std::string>> rows;
  const auto lines = lines_of(body.substr(head));
  for (std::size_t i = 2; i < lines.size() && !lines[i].empty() && lines[i][0] == '|'; ++i) {
    std::vector<std::string> cells;
    std::istringstream row(lines[i].substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      std::erase(cell, '`');
      const auto from = cell.find_first_not_of(' ');
      const auto to = cell.find_last_not_of(' ');
      cells.push_back(from == std::string::npos ? std::string() : cell.substr(from, to - from + 1));
    }
    rows.push_back(std::move(cells));
  }
  REQUIRE_MESSAGE(!rows.empty(), (heading + ": the table has no rows"));
  return rows;
}

// A frame drawn as "offset  size  field  meaning" lines: each field's offset and size as printed.
struct DrawnField {
  std::size_t offset = 0;
  std::size_t size = 0;
  std::string name;
};

// "u64" -> 8, "4xi64" -> 32, "48" or "48 B" -> 48; 0 when it is no size.
std::size_t field_bytes(const std::string& size) {
  const std::map<std::string, std::size_t> scalar{{"u8", 1}, {"i8", 1}, {"u16", 2}, {"u32", 4},
                                                  {"u64", 8}, {"i64", 8}, {"f64", 8}};
  if (const auto it = scalar.find(size); it != scalar.end()) return it->second;
  if (const auto x = size.find('x'); x != std::string::npos) {
    const auto count = std::stoul(size.substr(0, x));
    return count * field_bytes(size.substr(x + 1));
  }
  if (!size.empty() && std::all_of(size.begin(), size.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::stoul(size);
  return 0;
}

std::vector<DrawnField> drawn_fields(const std::string& block) {
  std::vector<DrawnField> fields;
  for (const std::string& line : lines_of(block)) {
    std::istringstream words(line);
    std::string offset, size, name;
    if (!(words >> offset >> size >> name)) continue;
    if (offset.empty() || offset[0] < '0' || offset[0] > '9') continue;  // a continuation line
    if (name == "B") words >> name;                                         // "48 B  payload"
    fields.push_back({std::stoul(offset), field_bytes(size), name});
  }
  return fields;
}

// The fields are contiguous from offset 0, each as large as printed, and end at `bytes`; each
// named in `offsets` sits where the struct has it.
void check_frame(const std::string& what, const std::vector<DrawnField>& fields, std::size_t bytes,
                 const std::map<std::string, std::size_t>& offsets) {
  REQUIRE_MESSAGE(!fields.empty(), what);
  std::size_t next = 0;
  for (const DrawnField& field : fields) {
    CHECK_MESSAGE(field.size != 0, (what + ": " + field.name + " has no size the test knows"));
    CHECK_MESSAGE(field.offset == next, (what + ": " + field.name + " at " + std::to_string(field.offset) +
                                            ", the field before ends at " + std::to_string(next)));
    next = field.offset + field.size;
    if (const auto it = offsets.find(field.name); it != offsets.end())
      CHECK_MESSAGE(field.offset == it->second, (what + ": " + field.name + " is at " + std::to_string(it->second)));
  }
  CHECK_MESSAGE(next == bytes, (what + ": the drawing ends at " + std::to_string(next) + ", the frame has " +
                                   std::to_string(bytes) + " bytes"));
  for (const auto& [name, offset] : offsets) {
    const bool drawn = std::any_of(fields.begin(), fields.end(), [&](const DrawnField& f) { return f.name == name; });
    CHECK_MESSAGE(drawn, (what + ": the drawing lacks the field " + name));
  }
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

TEST_CASE("DESIGN's drawing of the shared memory is shm/layout.hpp's, under the layout version the code has") {
  const std::string design = read_doc("docs/DESIGN.md");
  const std::string heading = "## Shared memory, layout version " + std::to_string(kLayoutVersion) + "\n";
  REQUIRE_MESSAGE(design.find(heading) != std::string::npos, heading);
  const auto drawn = lines_of(fenced_block(design, heading, ""));
  // layout.hpp's comment from the DATA OBJECT line to the lane object's last line, "// " removed.
  std::vector<std::string> code;
  bool inside = false;
  for (const std::string& line : lines_of(read_doc("shm/layout.hpp"))) {
    if (line.find("DATA OBJECT") != std::string::npos) inside = true;
    if (!inside) continue;
    REQUIRE_MESSAGE(line.rfind("//", 0) == 0, line);
    code.push_back(line.size() > 3 ? line.substr(3) : std::string());
    if (line.find("lane_bytes (") != std::string::npos) break;
  }
  REQUIRE(!code.empty());
  REQUIRE_MESSAGE(drawn.size() == code.size(), "DESIGN.md draws " << drawn.size() << " lines, layout.hpp "
                                                                  << code.size());
  for (std::size_t i = 0; i < code.size(); ++i) CHECK_MESSAGE(drawn[i] == code[i], "line " << i + 1);
}

TEST_CASE("DESIGN gives the ring capacity default as serve computes it") {
  const std::string rings = section(read_doc("docs/DESIGN.md"), "## The rings");
  // serve: --ring-capacity as given, else the larger of kDefaultRingCapacity and the power of two
  // at or above twice the workers (at most kMaxRingCapacity). The table prints examples of it.
  CHECK_MESSAGE(rings.find("at least " + std::to_string(kDefaultRingCapacity) + " slots") != std::string::npos, rings);
  CHECK(rings.find("power of two at or above twice the workers") != std::string::npos);
  const auto rows = table_rows(rings, "## The rings", "workers");
  for (const auto& row : rows) {
    REQUIRE(row.size() >= 2);
    const std::size_t workers = std::stoul(row[0]);
    const std::uint32_t wanted =
        std::min(static_cast<std::uint32_t>(std::bit_ceil(std::max<std::size_t>(2 * workers, 1))), kMaxRingCapacity);
    CHECK_MESSAGE(std::stoul(row[1]) == std::max(kDefaultRingCapacity, wanted), "workers " << workers);
  }
}

TEST_CASE("PROTOCOL draws the request, response and signal slots as frames.hpp lays them out") {
  const std::string frames = section(read_doc("docs/PROTOCOL.md"), "## 2. The ring frames");
  const std::string request = fenced_block(frames, "Request slot:", "");
  check_frame("request slot", drawn_fields(request), sizeof(RequestSlot),
              {{"seq", offsetof(RequestSlot, seq)},
               {"opcode", offsetof(RequestSlot, opcode)},
               {"flags", offsetof(RequestSlot, flags)},
               {"stamp", offsetof(RequestSlot, stamp)},
               {"params", offsetof(RequestSlot, params)}});
  const std::string response = fenced_block(frames, "Response slot", "");
  check_frame("response slot", drawn_fields(response), sizeof(ResponseSlot),
              {{"seq", offsetof(ResponseSlot, seq)},
               {"opcode", offsetof(ResponseSlot, opcode)},
               {"status", offsetof(ResponseSlot, status)},
               {"stamp", offsetof(ResponseSlot, stamp)},
               {"pnl", offsetof(ResponseSlot, pnl)},
               {"trades", offsetof(ResponseSlot, trades)},
               {"extra", offsetof(ResponseSlot, extra)}});
  const std::string signal = fenced_block(frames, "carries `SignalSlot`s", "");
  check_frame("signal slot", drawn_fields(signal), sizeof(SignalSlot),
              {{"bar", offsetof(SignalSlot, bar)},
               {"stamp", offsetof(SignalSlot, stamp)},
               {"subscription", offsetof(SignalSlot, subscription)},
               {"value", offsetof(SignalSlot, value)},
               {"pnl", offsetof(SignalSlot, pnl)},
               {"trades", offsetof(SignalSlot, trades)},
               {"tick", offsetof(SignalSlot, tick)},
               {"dropped", offsetof(SignalSlot, dropped)},
               {"cross", offsetof(SignalSlot, cross)},
               {"position", offsetof(SignalSlot, position)},
               {"flags", offsetof(SignalSlot, flags)}});
  // The prose sizes: every slot is one 64-byte line.
  CHECK(sizeof(RequestSlot) == 64);
  CHECK(frames.find(std::to_string(sizeof(RequestSlot)) + "-byte slots") != std::string::npos);
  const std::string exchange = section(read_doc("docs/PROTOCOL.md"), "## 3. The exchange line");
  CHECK(exchange.find(std::to_string(sizeof(RequestSlot)) + "-byte exchange line") != std::string::npos);
  check_frame("exchange line", drawn_fields(fenced_block(exchange, "## 3. The exchange line", "")),
              sizeof(RequestSlot), {{"seq", 0}, {"stamp", offsetof(RequestSlot, stamp)}});
}

TEST_CASE("DESIGN and PROTOCOL print the bounds of kernel/cost.hpp as the code has them") {
  const std::string design = read_doc("docs/DESIGN.md");
  const std::string bounded = section(design, "## Bounded work per frame");
  CHECK_MESSAGE(bounded.find(with_commas(kDefaultMaxFrameCost)) != std::string::npos, "--max-frame-cost");
  CHECK_MESSAGE(bounded.find(with_commas(kDefaultMaxBarCost)) != std::string::npos, "--max-bar-cost");
  // The example the bound is chosen for: L = 2000 on 1,000,000 bars fits, and costs what is printed.
  const std::uint64_t largest = backtest_cost(combo_from_length(2000), 1'000'000);
  CHECK(largest <= kDefaultMaxFrameCost);
  CHECK_MESSAGE(bounded.find("costs " + with_commas(largest)) != std::string::npos, with_commas(largest));
  const std::string workers = section(design, "## Workers");
  CHECK_MESSAGE(workers.find(with_commas(kDefaultInlineCost) + " units by default") != std::string::npos,
                "--inline-cost");
  // The backtest each page gives as the size of --inline-cost costs what it prints, and that is
  // within a tenth of the default.
  const std::regex example(R"(about a ([0-9,]+)-bar backtest of L = ([0-9]+) \(([0-9,]+)\s+units\))");
  for (const std::string& text : {workers, section(read_doc("docs/RESULTS.md"), "### What a hand-over to a worker costs")}) {
    std::smatch found;
    REQUIRE_MESSAGE(std::regex_search(text, found, example), "an --inline-cost example");
    const std::uint64_t cost =
        backtest_cost(combo_from_length(static_cast<std::int64_t>(without_commas(found[2]))), without_commas(found[1]));
    CHECK_MESSAGE(cost == without_commas(found[3]), found.str(0));
    CHECK_MESSAGE(cost * 10 >= kDefaultInlineCost * 9, found.str(0));
    CHECK_MESSAGE(cost * 10 <= kDefaultInlineCost * 11, found.str(0));
  }
  const std::string protocol = read_doc("docs/PROTOCOL.md");
  for (const auto& row : table_rows(protocol, "## 2. The ring frames", "status"))
    if (row[1] == "too_costly") CHECK(row[2].find(with_commas(kDefaultMaxFrameCost) + " units by default") != std::string::npos);
  for (const auto& row : table_rows(protocol, "### 1.3 Error reply", "code"))
    if (row[1] == "too_costly") CHECK(row[2].find(with_commas(kDefaultMaxFrameCost) + " by default") != std::string::npos);
}

TEST_CASE("PROTOCOL lists every engine status and opcode under its wire value and name") {
  const std::string protocol = read_doc("docs/PROTOCOL.md");
  std::map<unsigned, std::string> statuses;
  for (const auto& row : table_rows(protocol, "## 2. The ring frames", "status")) statuses[static_cast<unsigned>(std::stoul(row[0]))] = row[1];
  for (unsigned v = 0; v < 256; ++v) {
    const std::string_view name = to_string(static_cast<Status>(v));
    if (name == "unknown") continue;
    REQUIRE_MESSAGE(statuses.contains(v), "status " << v << " (" << name << ") is not in PROTOCOL section 2");
    CHECK(statuses[v] == name);
  }
  for (const auto& [value, name] : statuses)
    if (name != "(unused)") CHECK_MESSAGE(to_string(static_cast<Status>(value)) == name, "status " << value);
  std::map<unsigned, std::string> opcodes;
  for (const auto& row : table_rows(protocol, "## 2. The ring frames", "opcode")) opcodes[static_cast<unsigned>(std::stoul(row[0]))] = row[1];
  for (unsigned v = 0; v < 256; ++v) {
    const std::string_view name = to_string(static_cast<Opcode>(v));
    if (name == "unknown") continue;
    REQUIRE_MESSAGE(opcodes.contains(v), "opcode " << v << " (" << name << ") is not in PROTOCOL section 2");
    CHECK(opcodes[v] == name);
  }
  for (const auto& [value, name] : opcodes) CHECK_MESSAGE(to_string(static_cast<Opcode>(value)) == name, "opcode " << value);
}

TEST_CASE("PROTOCOL lists every socket opcode and error code under its wire value and name") {
  const std::string protocol = read_doc("docs/PROTOCOL.md");
  std::map<unsigned, std::string> opcodes;
  for (const auto& row : table_rows(protocol, "### 1.2 Opcodes", "opcode")) opcodes[static_cast<unsigned>(std::stoul(row[0]))] = row[1];
  unsigned highest = 0;
  for (unsigned v = 0; v < 256; ++v) {
    const std::string_view name = to_string(static_cast<SocketOpcode>(v));
    if (name == "unknown") continue;
    highest = v;
    REQUIRE_MESSAGE(opcodes.contains(v), "socket opcode " << v << " (" << name << ") is not in PROTOCOL 1.2");
    CHECK(opcodes[v] == name);
  }
  for (const auto& [value, name] : opcodes)
    CHECK_MESSAGE(to_string(static_cast<SocketOpcode>(value)) == name, "socket opcode " << value);
  // The request's opcode byte and the unknown_opcode row give the same range.
  CHECK(fenced_block(protocol, "### 1.1 Request", "").find("opcode       0.." + std::to_string(highest)) !=
        std::string::npos);
  std::map<unsigned, std::string> errors;
  for (const auto& row : table_rows(protocol, "### 1.3 Error reply", "code")) errors[static_cast<unsigned>(std::stoul(row[0]))] = row[1];
  for (unsigned v = 0; v < 256; ++v) {
    const std::string_view name = to_string(static_cast<SocketError>(v));
    if (name == "unknown") continue;
    REQUIRE_MESSAGE(errors.contains(v), "socket error " << v << " (" << name << ") is not in PROTOCOL 1.3");
    CHECK(errors[v] == name);
  }
  for (const auto& [value, name] : errors)
    CHECK_MESSAGE(to_string(static_cast<SocketError>(value)) == name, "socket error " << value);
  CHECK(errors[static_cast<unsigned>(SocketError::unknown_opcode)].size() > 0);
  for (const auto& row : table_rows(protocol, "### 1.3 Error reply", "code"))
    if (row[1] == "unknown_opcode") CHECK(row[2] == "opcode > " + std::to_string(highest));
}

TEST_CASE("the exit codes in OPERATIONS, the README and --help are the ones the code returns") {
  // Each code and the word its meaning starts with, as every document prints it.
  const std::vector<std::pair<int, std::string>> codes{
      {0, "ok"},           {kExitFailure, "failed"},          {kExitUsage, "usage"},
      {kExitInput, "bad input"}, {kExitEnvironment, "environment"}, {kExitEngineGone, "engine"},
      {kExitStrategy, "a strategy"}};
  const auto rows = table_rows(read_doc("docs/OPERATIONS.md"), "## Exit codes", "code");
  REQUIRE(rows.size() == codes.size());
  const std::string readme = read_doc("README.md");
  const std::string help(kExitCodesHelp);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    const auto& [code, word] = codes[i];
    CHECK_MESSAGE(std::stoi(rows[i][0]) == code, "OPERATIONS row " << i);
    CHECK_MESSAGE(rows[i][1].rfind(word, 0) == 0, "OPERATIONS: code " << code << " means " << word);
    const std::string printed = std::to_string(code) + " " + word;
    CHECK_MESSAGE(help.find(printed) != std::string::npos, "--help: " << printed);
    CHECK_MESSAGE(readme.find(printed) != std::string::npos, "README: " << printed);
  }
}

TEST_CASE("PROTOCOL draws the header's strategy table entry and size as layout.hpp has them") {
  const std::string handoff = section(read_doc("docs/PROTOCOL.md"), "## 4. The hand-off");
  check_frame("strategy entry", drawn_fields(fenced_block(handoff, "strategy_table", "")), sizeof(StrategyEntry),
              {{"name", offsetof(StrategyEntry, name)},
               {"param_names", offsetof(StrategyEntry, param_names)},
               {"value_names", offsetof(StrategyEntry, value_names)},
               {"example", offsetof(StrategyEntry, example)},
               {"param_count", offsetof(StrategyEntry, param_count)},
               {"live", offsetof(StrategyEntry, live)}});
  const std::string header_bytes = std::to_string(kHeaderBytes) + " bytes)";  // "(16384 bytes)"
  CHECK(handoff.find(header_bytes) != std::string::npos);
  CHECK(handoff.find("(u32, 1.." + std::to_string(kMaxStrategies) + ")") != std::string::npos);
}

TEST_CASE("OPERATIONS gives each wait mode's idle cost and the mode for a laptop; RESULTS has the run behind it") {
  const std::string idle = section(read_doc("docs/OPERATIONS.md"), "## Idle cost");
  for (const char* mode : {"`spin`", "`backoff`", "`block`"}) CHECK_MESSAGE(idle.find(mode) != std::string::npos, mode);
  CHECK(idle.find("On a laptop") != std::string::npos);
  CHECK(idle.find("run `--wait block`") != std::string::npos);
  const std::string run = section(read_doc("docs/RESULTS.md"), "## Idle cost per wait mode");
  CHECK(run.find("`tools/idle_cost") != std::string::npos);  // the command
  CHECK(run.find("model name") != std::string::npos);        // the CPU it ran on
  for (const char* mode : {"| spin |", "| backoff |", "| block |"}) CHECK_MESSAGE(run.find(mode) != std::string::npos, mode);
}

TEST_CASE("every setting OPERATIONS names under systemd is one the shipped ipcfloor@.service holds") {
  const std::string systemd = section(read_doc("docs/OPERATIONS.md"), "## Under systemd");
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

namespace {

// Each layer tools/layers knows and the layers it may use, read from its ALLOWED table.
std::map<std::string, std::vector<std::string>> allowed_layers() {
  const std::string tool = read_doc("tools/layers");
  const auto open = tool.find("ALLOWED = {");
  REQUIRE(open != std::string::npos);
  const std::string table = tool.substr(open, tool.find("\n}", open) - open);
  std::map<std::string, std::vector<std::string>> allowed;
  const std::regex entry(R"re("([a-z_]+)": (?:set\(\)|\{([^}]*)\}))re");
  const std::regex name(R"re("([a-z_]+)")re");
  for (auto it = std::sregex_iterator(table.begin(), table.end(), entry); it != std::sregex_iterator(); ++it) {
    const std::string uses = (*it)[2];
    std::vector<std::string>& list = allowed[(*it)[1]];
    for (auto n = std::sregex_iterator(uses.begin(), uses.end(), name); n != std::sregex_iterator(); ++n) list.push_back((*n)[1]);
    std::sort(list.begin(), list.end());
  }
  REQUIRE(allowed.size() > 5);
  return allowed;
}

// The targets a CMakeLists.txt declares (an ALIAS is a second name, not a target).
std::vector<std::string> targets_declared(const std::string& cmake) {
  std::vector<std::string> targets;
  const std::regex declared(R"(add_(?:library|executable)\(([A-Za-z0-9_-]+)[\s)])");
  for (auto it = std::sregex_iterator(cmake.begin(), cmake.end(), declared); it != std::sregex_iterator(); ++it)
    targets.push_back((*it)[1]);
  return targets;
}

std::vector<std::string> split_list(const std::string& cell) {
  std::vector<std::string> items;
  std::istringstream in(cell);
  for (std::string item; std::getline(in, item, ',');) {
    const auto from = item.find_first_not_of(' ');
    if (from != std::string::npos) items.push_back(item.substr(from, item.find_last_not_of(' ') - from + 1));
  }
  return items;
}

}  // namespace

TEST_CASE("DESIGN's layer sentence names each folder that builds more than one target, and every one of them") {
  const std::string design = read_doc("docs/DESIGN.md");
  const std::string layers = section(design, "## Layers");
  const std::string sentence = layers.substr(0, layers.find("```"));
  for (const auto& [layer, uses] : allowed_layers()) {
    const std::string cmake = std::string(IPCFLOOR_SOURCE_DIR) + "/" + layer + "/CMakeLists.txt";
    if (!std::filesystem::exists(cmake)) continue;  // a layer of one file (the strategy ABI), below
    const std::vector<std::string> targets = targets_declared(read_doc(layer + "/CMakeLists.txt"));
    CAPTURE(layer);
    CHECK(!targets.empty());
    if (targets.size() < 2) continue;
    CHECK_MESSAGE(sentence.find("`" + layer + "/`") != std::string::npos, "the folder is named as an exception");
    for (const std::string& target : targets)
      CHECK_MESSAGE(sentence.find("`" + target + "`") != std::string::npos, target);
  }
  // The strategy ABI: one header, its own target, declared beside the layers.
  CHECK(sentence.find("`include/ipcfloor/strategy.h`") != std::string::npos);
  const std::vector<std::string> top = targets_declared(read_doc("CMakeLists.txt"));
  REQUIRE(std::find(top.begin(), top.end(), "ipcfloor_strategy") != top.end());
  CHECK(sentence.find("`ipcfloor_strategy`") != std::string::npos);
}

TEST_CASE("DESIGN's table of who may use whom is tools/layers' own") {
  const auto allowed = allowed_layers();
  std::map<std::string, std::vector<std::string>> drawn;
  for (const auto& row : table_rows(read_doc("docs/DESIGN.md"), "## Layers", "layer")) {
    REQUIRE(row.size() >= 2);
    std::vector<std::string> uses = row[1] == "nothing" ? std::vector<std::string>{} : split_list(row[1]);
    std::sort(uses.begin(), uses.end());
    for (const std::string& layer : split_list(row[0])) drawn[layer] = uses;
  }
  for (const auto& [layer, uses] : allowed) {
    CAPTURE(layer);
    REQUIRE_MESSAGE(drawn.count(layer) == 1, "the table has a row for it");
    if (drawn[layer] == std::vector<std::string>{"every layer below it"}) {
      CHECK(uses.size() + 2 == allowed.size());  // all but itself and the one beside it (cluster)
      continue;
    }
    CHECK(drawn[layer] == uses);
  }
  CHECK(drawn.size() == allowed.size());
}

TEST_CASE("the strategy header's counts and STRATEGIES' table say what the header declares") {
  const std::string header = read_doc("include/ipcfloor/strategy.h");
  const std::map<std::string, std::size_t> words{{"two", 2}, {"three", 3}, {"four", 4}, {"five", 5}, {"six", 6}};
  // The live part: as many function pointers as its heading says, all set or all NULL.
  std::smatch heading;
  REQUIRE(std::regex_search(header, heading, std::regex(R"(Optional: live mode\. All ([a-z]+) set, or all NULL)")));
  REQUIRE(words.count(heading[1]) == 1);
  const auto live_from = header.find(heading.str(0));
  const std::string live = header.substr(live_from, header.find("} ipcfloor_strategy;", live_from) - live_from);
  std::vector<std::string> functions;
  const std::regex pointer(R"(\(\*([a-z_]+)\))");
  for (auto it = std::sregex_iterator(live.begin(), live.end(), pointer); it != std::sregex_iterator(); ++it)
    functions.push_back((*it)[1]);
  CHECK(functions.size() == words.at(heading[1]));
  // STRATEGIES' row names the same functions and the same count.
  const std::string strategies = read_doc("docs/STRATEGIES.md");
  const auto row_at = strategies.find("| live part (optional) |");
  REQUIRE(row_at != std::string::npos);
  const std::string row = strategies.substr(row_at, strategies.find('\n', row_at) - row_at);
  std::smatch count;
  REQUIRE(std::regex_search(row, count, std::regex(R"(all ([a-z]+) set or all NULL)")));
  REQUIRE(words.count(count[1]) == 1);
  CHECK(words.at(count[1]) == functions.size());
  for (const std::string& function : functions) CHECK_MESSAGE(row.find("`" + function + "`") != std::string::npos, function);
  // The counts the header's opening names: parameters and the length of a name.
  CHECK(header.find("the parameter count (1.." + std::to_string(IPCFLOOR_STRATEGY_MAX_PARAMS) + ")") != std::string::npos);
  CHECK(header.find("(1-" + std::to_string(IPCFLOOR_STRATEGY_NAME_MAX) + " characters") != std::string::npos);
}
