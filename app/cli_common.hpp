#pragma once
// What every subcommand of the command line shares: the exit code of a failure and the way an
// error reaches the user, the ranges every option is checked against, and the GBM options that
// gen, sweep and serve all take.
//
// Every option has a range (docs/OPERATIONS.md, "Exit codes"): a value outside it, or a value
// that is not what the option takes, is refused by CLI11 before anything runs, naming the option
// and its range, with exit code 2 (usage). A cross-option rule that CLI11 cannot check (one
// option bounded by another) is refused by the subcommand with usage_error(), also exit 2.
// Bad content of a file (a series, a combo file) is exit 3.

#include <charconv>
#include <cmath>
#include <concepts>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "data/gbm.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {

// Prints "ipcfloor COMMAND: MESSAGE" on stderr and returns exit_code_for(error.code).
int report_error(std::string_view command, const Error& error);

// Prints "ipcfloor COMMAND: MESSAGE" on stderr and returns kExitUsage: a command line whose
// options disagree with each other.
int usage_error(std::string_view command, std::string_view message);

// A command line CLI11 refused (an unknown option, a value outside its range, options that
// exclude each other): "ipcfloor COMMAND: WHAT", with "did you mean --cpu?" for an option or a
// command it does not know, and where the help is; returns kExitUsage. A request for help
// (--help) prints it and returns 0.
int report_parse_error(CLI::App& app, const CLI::ParseError& error, int argc, char** argv);

namespace cli_detail {

// Parses a whole decimal number of type T: integers without a base prefix (CLI11 would read
// "010" as octal) or, for an unsigned T, a sign; floating point finite. False otherwise.
template <class T>
bool parse_number(const std::string& text, T& value) {
  const char* end = text.data() + text.size();
  if constexpr (std::is_floating_point_v<T>) {
    const auto [at, error] = std::from_chars(text.data(), end, value);
    return error == std::errc{} && at == end && std::isfinite(value);
  } else {
    if (text.size() > 1 && (text[0] == '0' || (text[0] == '-' && text[1] == '0'))) return false;
    const auto [at, error] = std::from_chars(text.data(), end, value, 10);
    return error == std::errc{} && at == end;
  }
}

}  // namespace cli_detail

// The range [lo, hi] of a number option, as a CLI11 validator. Its help shows "in LO..HI"; a
// value outside it, or not a plain decimal number of the option's type, is refused as
// "--opt: VALUE is outside LO..HI" (exit 2). Integers are passed on in canonical decimal.
template <class T>
  requires std::is_arithmetic_v<T>
CLI::Validator in_range(T lo, T hi) {
  const std::string range = fmt::format("{}..{}", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        T value{};
        if (!cli_detail::parse_number(text, value))
          return fmt::format("'{}' is not {} in {}", text,
                             std::is_floating_point_v<T> ? "a finite number" : "a whole number", range);
        if (value < lo || value > hi) return fmt::format("{} is outside {}", text, range);
        if constexpr (std::is_integral_v<T>) text = fmt::format("{}", value);
        return {};
      },
      "in " + range);
}

// A power of two in [lo, hi] (ring and signal capacities).
[[nodiscard]] CLI::Validator power_of_two(std::uint64_t lo, std::uint64_t hi);

// One of `words`, spelled exactly: "--wait: 'x' is not one of spin, backoff, block".
[[nodiscard]] CLI::Validator one_of(std::initializer_list<std::string_view> words);

// An engine name as `serve --name` takes it (shm/segment.hpp, valid_segment_name).
[[nodiscard]] CLI::Validator engine_name();
// A user (a name or a uid the host knows; common/peer_policy.hpp resolve_user) / a group.
[[nodiscard]] CLI::Validator known_user();
[[nodiscard]] CLI::Validator known_group();

// A strategy's name as a strategy declares it (include/ipcfloor/strategy.h): 1..31 characters of
// a-z 0-9 _ -. Whether the engine serves it is checked against its table.
[[nodiscard]] CLI::Validator strategy_name();

// The error for a strategy `wanted` that engine `engine` (attached as `segment`) does not serve:
// it lists the ones it does. exit 3.
[[nodiscard]] Error unknown_strategy(std::string_view engine, std::string_view wanted, const Attachment& segment);

// An absolute directory path (the socket directory); that it exists is checked where it is used.
[[nodiscard]] CLI::Validator absolute_path();

// A file path: not empty. Whether it can be read is checked where it is read (exit 3).
[[nodiscard]] CLI::Validator file_path();

// HOST:PORT or PORT, as socket/tcp_endpoint.hpp parses it.
[[nodiscard]] CLI::Validator tcp_endpoint();

// A comma-separated list of lengths ("6,8,11"), as data/grid.hpp parses it.
[[nodiscard]] CLI::Validator length_list();

// FIRST:LAST:COUNT, as data/grid.hpp parses it.
[[nodiscard]] CLI::Validator grid_spec();

// A cpu index in 0..CPU_SETSIZE-1 (whether this process may use it is checked when it pins).
[[nodiscard]] CLI::Validator cpu_index();

// A cpu index as cpu_index() takes it, or `word` spelled exactly (serve --cpu auto, --client-cpu near).
[[nodiscard]] CLI::Validator cpu_index_or(std::string_view word);

// "cpu 3", "cpus 0,1,2", or "any cpu" for none: how logs and checks name a set of cpus.
[[nodiscard]] std::string cpu_list(const std::vector<int>& cpus);

// A kernel cpu list such as "0-6,8" (common/affinity.hpp), each cpu in 0..CPU_SETSIZE-1.
[[nodiscard]] CLI::Validator cpu_list_spec();

// The directory engines' sockets live in when no --socket-dir says: $IPCFLOOR_SOCKET_DIR, else the
// user's private directory (shm/socket_dir.hpp, the client library's rule).
[[nodiscard]] std::string socket_dir_default();

// --socket-dir DIR on `command`, bound to `dir` (which should start as socket_dir_default()).
CLI::Option* add_socket_dir_option(CLI::App& command, std::string& dir);

// --column NAME on `command`, bound to `column`: which column of a CSV --data holds the closes
// (data/series_io.hpp); without it, `close`, or the only column of a file without a header.
CLI::Option* add_column_option(CLI::App& command, std::string& column);

// --bars --seed --mu --sigma --s0 --dt, bound to `gbm`, each with its range. When `given` is
// set, it turns true if the command line names any of them.
void add_gbm_options(CLI::App& command, GbmParams& gbm, bool* given = nullptr);

// --strategy: a name an engine serves (strategy_name) or a FILE.so path (under 4096 bytes).
[[nodiscard]] CLI::Validator strategy_name_or_file();
// --series: a series' name or index, 1..255 characters.
[[nodiscard]] CLI::Validator series_name_or_index();

// The command line as a shell would take it back: "ipcfloor" and each argument, single-quoted
// where it holds anything but letters, digits and -_./:=,+ (for a results file's provenance).
[[nodiscard]] std::string shell_words(int argc, const char* const* argv);

}  // namespace ipcfloor
