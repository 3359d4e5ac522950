#pragma once
// Combos as a researcher writes them down, named by their strategy's parameters (for the
// built-in strategy the six windows h, L, s, p3, p2, p): a CSV file whose header names every
// parameter (in any column order; other columns are ignored), or JSON lines, one object per
// combo, either with the parameters as fields (`{"h":3,"L":6,"s":2,"p3":1,"p2":2,"p":3}`) or as
// `{"params":[3,6,2,1,2,3]}` (as many values as the strategy has parameters, or six with the
// unused ones 0). A parameter the strategy does not use is 0. The grid is one shape of study; a
// combo list is any other.
//
// A file that cannot be read, or has no recognisable header or format, is an error. A single bad
// row is not: it comes back with its line number and what is wrong with it, so a sweep can report
// it in place and run the rest. Setup path: allocates, any thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "kernel/strategy.hpp"

namespace ipcfloor {

struct ComboLine {
  std::size_t line = 0;  // 1-based line in the source (0 for combos that did not come from text)
  Combo combo{};         // all zero when the row did not parse: never run or print it then
  std::string error;     // empty when the row parsed; otherwise why it did not
  std::string raw;       // the row's text as written (trimmed; control bytes escaped, long rows cut)
};

// The parameter names a combo file uses for a strategy, in order.
struct ComboColumns {
  std::array<std::string_view, 6> names{};
  std::size_t count = 0;
};
[[nodiscard]] ComboColumns columns_of(const Strategy& strategy) noexcept;

// The rows of a combo file in a compact form: per row the values of the strategy's parameters
// only (8 bytes each), its place in the text and whether it parsed (bytes_per_row), and the text
// itself, from which a row's line number is counted and a row that did not parse is read again,
// with its error, when asked for. So a file of short rows takes a few times its size, never
// dozens (parse_combos counts its rows before allocating). Combos that come from no file (a grid,
// lengths) fit here too: `of`. Read-only after parsing; any thread.
class ComboRows {
 public:
  // Bytes one row of a strategy of `params` parameters takes here, besides the text.
  [[nodiscard]] static constexpr std::size_t bytes_per_row(std::size_t params) noexcept {
    return params * sizeof(std::int64_t) + sizeof(std::uint32_t) + 2;
  }

  // Combos that did not come from text: line 0, all parsed (allocates).
  [[nodiscard]] static ComboRows of(std::vector<Combo> combos);

  [[nodiscard]] std::size_t size() const noexcept { return rows_; }
  [[nodiscard]] bool parsed(std::size_t i) const noexcept { return parsed_.empty() || parsed_[i] != 0; }
  // Row i's combo, the unused parameters 0; all zero when it did not parse.
  [[nodiscard]] Combo combo(std::size_t i) const noexcept;
  // Row i's 1-based line in the text, counted from the nearest of every 64th row's; 0 for combos
  // that did not come from text.
  [[nodiscard]] std::size_t line(std::size_t i) const noexcept;
  // Row i whole: for a row that did not parse, its error and text (allocates).
  [[nodiscard]] ComboLine operator[](std::size_t i) const;

 private:
  friend Expected<ComboRows> parse_combos(std::string text, std::string_view source, const ComboColumns& columns,
                                          std::size_t kept_bytes_per_row);
  static constexpr std::size_t kRowsPerLineMark = 64;

  std::string text_;
  bool json_ = false;
  std::array<std::string, 6> names_{};   // the columns' names, which a row's error names (owned:
  std::size_t count_ = 0;                // a strategy's names may not outlive the rows)
  std::size_t header_fields_ = 0;        // CSV: fields of the header
  std::array<std::size_t, 6> column_{};  // CSV: the field of each column
  std::size_t rows_ = 0;
  std::size_t stride_ = 6;               // values kept per row: the parameters (6 for `of`)
  std::vector<std::int64_t> values_;     // rows_ x stride_
  std::vector<std::uint32_t> offsets_;   // where each row's line starts in text_; empty: no text
  std::vector<std::uint32_t> line_marks_;  // the line of every kRowsPerLineMark-th row
  std::vector<std::uint8_t> parsed_;     // empty: no row came from text
};

// The largest combo input read: 32 MiB, about two million rows (less when the host has less
// memory available: data/input_file.hpp).
inline constexpr std::size_t kMaxComboFileBytes = std::size_t{32} << 20;

// Parses `text` (CSV with a header, or JSON lines; decided by the first non-blank character: `{`
// means JSON lines) with `columns` (default: the built-in strategy's), keeping the text. `source`
// names the input in errors. Blank lines are skipped. Before allocating the rows it counts what
// they take, ComboRows::bytes_per_row plus the caller's `kept_bytes_per_row` (what it keeps per
// row besides, such as a sweep's state of each row) for every line that is not blank, against
// the memory the host has available: resource, naming the rows and bytes, when it cannot back them.
[[nodiscard]] Expected<ComboRows> parse_combos(std::string text, std::string_view source,
                                               const ComboColumns& columns = columns_of(builtin()),
                                               std::size_t kept_bytes_per_row = 0);

// A combo input read whole but not parsed yet (a command that must reach an engine to learn the
// strategy's columns reads first, so a bad path fails before any connection).
struct ComboInput {
  std::string text;
  std::string source;  // names the input in errors
};
// Reads `path` under the rules of load_combos below. Setup path: allocates.
[[nodiscard]] Expected<ComboInput> read_combo_input(const std::string& path);

// Reads and parses `path`; "-" reads standard input. Only a regular file or standard input is
// read (never a FIFO or a device), and at most kMaxComboFileBytes of it: invalid_argument
// otherwise, naming the path and what it is; permission or io when the OS refuses the file;
// resource as parse_combos says.
[[nodiscard]] Expected<ComboRows> load_combos(const std::string& path,
                                              const ComboColumns& columns = columns_of(builtin()),
                                              std::size_t kept_bytes_per_row = 0);

}  // namespace ipcfloor
