#pragma once
// Combos as a researcher writes them down: a CSV file with the header `h,L,s,p3,p2,p` (the six
// windows, in any column order), or JSON lines, one object per combo, either with the six
// windows as fields (`{"h":3,"L":6,"s":2,"p3":1,"p2":2,"p":3}`) or as `{"params":[3,6,2,1,2,3]}`.
// The grid is one shape of study; a combo list is any other.
//
// A file that cannot be read, or has no recognisable header or format, is an error. A single bad
// row is not: it comes back with its line number and what is wrong with it, so a sweep can report
// it in place and run the rest. Setup path: allocates, any thread.

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

// The largest combo input read: 32 MiB, about two million rows (less when the host has less
// memory available: kernel/input_file.hpp).
inline constexpr std::size_t kMaxComboFileBytes = std::size_t{32} << 20;

// Parses `text` (CSV with a header, or JSON lines; decided by the first non-blank character: `{`
// means JSON lines). `source` names the input in errors. Blank lines are skipped.
[[nodiscard]] Expected<std::vector<ComboLine>> parse_combos(std::string_view text, std::string_view source);

// Reads and parses `path`; "-" reads standard input. Only a regular file or standard input is
// read (never a FIFO or a device), and at most kMaxComboFileBytes of it: invalid_argument
// otherwise, naming the path and what it is; permission or io when the OS refuses the file.
[[nodiscard]] Expected<std::vector<ComboLine>> load_combos(const std::string& path);

}  // namespace ipcfloor
