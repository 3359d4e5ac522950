#pragma once
// Combos as a researcher writes them down: a CSV file with the header `h,L,s,p3,p2,p` (the six
// windows, in any column order), or JSON lines, one object per combo, either with the six
// windows as fields (`{"h":3,"L":6,"s":2,"p3":1,"p2":2,"p":3}`) or as `{"params":[3,6,2,1,2,3]}`.
// The grid is one shape of study; a combo list is any other.
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

namespace ipcfloor {

struct ComboLine {
  std::size_t line = 0;  // 1-based line in the source (0 for combos that did not come from text)
  Combo combo{};         // all zero when the row did not parse: never run or print it then
  std::string error;     // empty when the row parsed; otherwise why it did not
  std::string raw;       // the row's text as written (trimmed; control bytes escaped, long rows cut)
};

// The rows of a combo file in a compact form: per row its combo, line and place in the text
// (57 bytes), and the text itself, from which a row that did not parse is read again when it is
// asked for. So a file of short rows takes a few times its size, never dozens (parse_combos
// counts it before allocating). Read-only after parsing; any thread.
class ComboRows {
 public:
  // Bytes one row takes here, besides the text.
  static constexpr std::size_t kBytesPerRow = sizeof(Combo) + 2 * sizeof(std::uint32_t) + 1;

  [[nodiscard]] std::size_t size() const noexcept { return combos_.size(); }
  [[nodiscard]] bool parsed(std::size_t i) const noexcept { return parsed_[i] != 0; }
  [[nodiscard]] const Combo& combo(std::size_t i) const noexcept { return combos_[i]; }  // zero when not parsed
  [[nodiscard]] std::size_t line(std::size_t i) const noexcept { return lines_[i]; }
  // Row i whole: for a row that did not parse, its error and text (allocates).
  [[nodiscard]] ComboLine operator[](std::size_t i) const;

 private:
  friend Expected<ComboRows> parse_combos(std::string text, std::string_view source, std::size_t kept_bytes_per_row);

  std::string text_;
  bool json_ = false;
  std::size_t header_fields_ = 0;         // CSV: fields of the header
  std::array<std::size_t, 6> column_{};   // CSV: the field of each window
  std::vector<Combo> combos_;
  std::vector<std::uint32_t> lines_;
  std::vector<std::uint32_t> offsets_;   // where each row's line starts in text_
  std::vector<std::uint8_t> parsed_;
};

// The largest combo input read: 32 MiB, about two million rows (less when the host has less
// memory available: kernel/input_file.hpp).
inline constexpr std::size_t kMaxComboFileBytes = std::size_t{32} << 20;

// Parses `text` (CSV with a header, or JSON lines; decided by the first non-blank character: `{`
// means JSON lines), keeping it. `source` names the input in errors. Blank lines are skipped.
// Before allocating the rows it counts what they take, ComboRows::kBytesPerRow and the
// caller's `kept_bytes_per_row` (what it will keep per row, such as a sweep's planned row) for
// every line, against the memory the host has available: resource, naming the rows and bytes,
// when it cannot back them.
[[nodiscard]] Expected<ComboRows> parse_combos(std::string text, std::string_view source,
                                               std::size_t kept_bytes_per_row = 0);

// Reads and parses `path`; "-" reads standard input. Only a regular file or standard input is
// read (never a FIFO or a device), and at most kMaxComboFileBytes of it: invalid_argument
// otherwise, naming the path and what it is; permission or io when the OS refuses the file;
// resource as parse_combos says.
[[nodiscard]] Expected<ComboRows> load_combos(const std::string& path, std::size_t kept_bytes_per_row = 0);

}  // namespace ipcfloor
