#include "app/cli_common.hpp"

#include <sched.h>

#include <cstdio>

#include <fmt/format.h>

#include "shm/socket_dir.hpp"
#include "common/affinity.hpp"
#include "kernel/grid.hpp"
#include "shm/segment.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor {
namespace {

// A validator from a parser of the option's text that returns Expected: its error is the
// refusal, without the error code.
template <class Parse>
CLI::Validator parsed_by(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        auto parsed = parse(text);
        return parsed ? std::string() : parsed.error().message;
      },
      std::move(description));
}

}  // namespace

int report_error(std::string_view command, const Error& error) {
  if (command.empty()) {
    fmt::print(stderr, "ipcfloor: {}\n", error.message);
  } else {
    fmt::print(stderr, "ipcfloor {}: {}\n", command, error.message);
  }
  return exit_code_for(error.code);
}

int usage_error(std::string_view command, std::string_view message) {
  fmt::print(stderr, "ipcfloor {}: {}\nRun with --help for more information.\n", command, message);
  return kExitUsage;
}

CLI::Validator power_of_two(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = fmt::format("a power of two in {}..{}", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        std::uint64_t value = 0;
        if (!cli_detail::parse_number(text, value) || value < lo || value > hi || (value & (value - 1)) != 0)
          return fmt::format("{} is not {}", text, range);
        text = fmt::format("{}", value);
        return {};
      },
      range);
}

CLI::Validator one_of(std::initializer_list<std::string_view> words) {
  std::string list;
  for (const std::string_view word : words) list += fmt::format("{}{}", list.empty() ? "" : ", ", word);
  std::vector<std::string> known(words.begin(), words.end());
  return CLI::Validator(
      [known, list](std::string& text) -> std::string {
        for (const std::string& word : known)
          if (text == word) return {};
        return fmt::format("'{}' is not one of {}", text, list);
      },
      "one of " + list);
}

CLI::Validator engine_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (valid_segment_name(text)) return {};
        return fmt::format("'{}' is not an engine name: 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)", text,
                           kMaxSegmentNameBytes);
      },
      "an engine name");
}

CLI::Validator absolute_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text.front() == '/' && text.size() < 4096) return {};
        return fmt::format("'{}' is not an absolute path", text);
      },
      "an absolute path");
}

CLI::Validator file_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text.size() < 4096 && text.find('\0') == std::string::npos) return {};
        return "a file path may not be empty";
      },
      "a path");
}

CLI::Validator tcp_endpoint() {
  return parsed_by([](const std::string& text) { return parse_tcp_endpoint(text); }, "HOST:PORT");
}

CLI::Validator length_list() {
  return parsed_by([](const std::string& text) { return parse_lengths(text); }, "lengths >= 1, comma-separated");
}

CLI::Validator grid_spec() {
  return parsed_by([](const std::string& text) { return parse_grid(text); }, "FIRST:LAST:COUNT");
}

CLI::Validator cpu_index() { return in_range(0, CPU_SETSIZE - 1); }

std::string cpu_list(const std::vector<int>& cpus) {
  if (cpus.empty()) return "any cpu";
  std::string text = cpus.size() == 1 ? "cpu " : "cpus ";
  for (std::size_t i = 0; i < cpus.size(); ++i) text += fmt::format("{}{}", i == 0 ? "" : ",", cpus[i]);
  return text;
}

CLI::Validator cpu_list_spec() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::vector<int> cpus = parse_cpu_list(text);
        if (cpus.empty()) return fmt::format("'{}' is not a cpu list such as 0-6,8", text);
        for (const int cpu : cpus)
          if (cpu < 0 || cpu >= CPU_SETSIZE) return fmt::format("cpu {} is outside 0..{}", cpu, CPU_SETSIZE - 1);
        return {};
      },
      "cpu list such as 0-6,8");
}

std::string socket_dir_default() { return default_socket_dir(); }

CLI::Option* add_socket_dir_option(CLI::App& command, std::string& dir) {
  return command
      .add_option("--socket-dir", dir,
                  "DIR of the engine's socket (default: $IPCFLOOR_SOCKET_DIR, else $XDG_RUNTIME_DIR/ipcfloor, else "
                  "/dev/shm/ipcfloor-UID: private to the user)")
      ->check(absolute_path())
      ->capture_default_str();
}

void add_gbm_options(CLI::App& command, GbmParams& gbm, bool* given) {
  // The bars' range: 8 bytes each, so 1e9 bars is 8 GB; what the host can hold is checked when
  // the series is made (kernel/series_source.hpp).
  CLI::Option* options[] = {
      command.add_option("--bars", gbm.bars, "number of bars to generate")
          ->check(in_range<std::size_t>(2, 1'000'000'000))
          ->capture_default_str(),
      command.add_option("--seed", gbm.seed, "numpy default_rng seed")
          ->check(in_range<std::uint64_t>(0, ~std::uint64_t{0}))
          ->capture_default_str(),
      command.add_option("--mu", gbm.mu, "drift per year")->check(in_range(-1000.0, 1000.0))->capture_default_str(),
      command.add_option("--sigma", gbm.sigma, "volatility per year")
          ->check(in_range(0.0, 1000.0))
          ->capture_default_str(),
      command.add_option("--s0", gbm.s0, "first close")->check(in_range(1e-9, 1e15))->capture_default_str(),
      command.add_option("--dt", gbm.dt, "bar length in years (default 1/(252*390))")->check(in_range(1e-12, 1.0)),
  };
  if (given == nullptr) return;
  for (CLI::Option* option : options) option->each([given](const std::string&) { *given = true; });
}

}  // namespace ipcfloor
