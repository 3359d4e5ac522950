#include "app/cli_common.hpp"
#include "common/peer_policy.hpp"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include <fmt/format.h>

#include "shm/socket_dir.hpp"
#include "common/affinity.hpp"
#include "data/grid.hpp"
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

// Edits (insert, delete, replace) between two words: how far a typo is from a name.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known name closest to `typo`, when it is close enough to be what was meant.
std::string closest(std::string_view typo, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, typo.size() / 3) + 1;
  for (const std::string& name : known) {
    const std::size_t distance = edit_distance(typo, name);
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

// " (did you mean --cpu?)" for each word of the command line the error names that is close to a
// name `command` knows: its options' long names, or (no command yet) the commands.
std::string suggestions(const CLI::App& app, const CLI::App* command, const std::string& message,
                        const std::vector<std::string>& words) {
  std::vector<std::string> known;
  if (command != nullptr) {
    for (const CLI::Option* option : command->get_options())
      for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
  } else {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (!sub->get_group().empty()) known.push_back(sub->get_name());
  }
  std::string text;
  for (const std::string& word : words) {
    const std::string name = word.substr(0, word.find('='));
    if (name.empty() || message.find(name) == std::string::npos) continue;
    if (command != nullptr && (name.size() < 2 || name[0] != '-' || (name[1] >= '0' && name[1] <= '9'))) continue;
    if (const std::string match = closest(name, known); !match.empty() && match != name)
      text += fmt::format(" (did you mean {}?)", match);
  }
  return text;
}

}  // namespace

int report_parse_error(CLI::App& app, const CLI::ParseError& error, int argc, char** argv) {
  if (error.get_exit_code() == 0) return app.exit(error);  // --help: the help, exit 0
  const std::vector<std::string> words(argv + 1, argv + argc);
  const CLI::App* command = nullptr;
  std::size_t first = 0;  // where the command's own words start
  for (std::size_t i = 0; i < words.size() && command == nullptr; ++i)
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == words[i]) {
        command = sub;
        first = i + 1;
      }
  const std::string message = error.what();
  const std::string hint =
      suggestions(app, command, message, std::vector<std::string>(words.begin() + static_cast<std::ptrdiff_t>(first),
                                                                    words.end()));
  // A value that came from an option's environment variable, not the command line, says so.
  std::string from_environment;
  if (command != nullptr)
    for (const CLI::Option* option : command->get_options()) {
      const std::string flag = "--" + (option->get_lnames().empty() ? std::string() : option->get_lnames().front());
      if (option->get_envname().empty() || message.rfind(flag + ":", 0) != 0) continue;
      if (std::none_of(words.begin() + static_cast<std::ptrdiff_t>(first), words.end(),
                       [&](const std::string& word) { return word.rfind(flag, 0) == 0; }))
        from_environment = fmt::format(" (the value of ${}, which {} takes when it is not given)",
                                       option->get_envname(), flag);
    }
  const std::string name = command == nullptr ? std::string() : " " + command->get_name();
  fmt::print(stderr, "ipcfloor{}: {}{}{}\nRun `ipcfloor{} --help` for the options and their ranges.\n", name, message,
             from_environment, hint, name);
  return kExitUsage;
}

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

namespace {

// A validator's verdict: empty when `checked` holds a value, else its error.
template <class T>
std::string error_of(const Expected<T>& checked) {
  return checked ? std::string() : checked.error().message;
}

}  // namespace

CLI::Validator known_user() {
  return CLI::Validator([](std::string& text) { return error_of(resolve_user(text, "user")); },
                        "a user name or uid this host knows");
}

CLI::Validator known_group() {
  return CLI::Validator([](std::string& text) { return error_of(resolve_group(text, "group")); },
                        "a group name or gid this host knows");
}

CLI::Validator strategy_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool valid = !text.empty() && text.size() <= IPCFLOOR_STRATEGY_NAME_MAX &&
                           text.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") == std::string::npos;
        if (valid) return {};
        return fmt::format("'{}' is not a strategy name: 1..{} characters of a-z 0-9 _ -", text,
                           IPCFLOOR_STRATEGY_NAME_MAX);
      },
      "a strategy name");
}

Error unknown_strategy(std::string_view engine, std::string_view wanted, const Attachment& segment) {
  std::string known;
  for (std::uint32_t i = 0; i < segment.strategy_count(); ++i)
    known += fmt::format("{}{}", i == 0 ? "" : ", ", segment.strategy_at(i).name);
  return Error{ErrorCode::invalid_argument,
               fmt::format("engine {} serves no strategy named '{}'; it serves: {} (serve --strategy FILE.so loads one)",
                           engine, wanted, known)};
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

CLI::Validator cpu_index_or(std::string_view word) {
  const std::string range = fmt::format("in 0..{} or {}", CPU_SETSIZE - 1, word);
  return CLI::Validator(
      [word = std::string(word), range](std::string& text) -> std::string {
        if (text == word) return {};
        int value = 0;
        if (!cli_detail::parse_number(text, value) || value < 0 || value >= CPU_SETSIZE)
          return fmt::format("'{}' is not a cpu {}", text, range);
        text = fmt::format("{}", value);
        return {};
      },
      range);
}

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
      // The variable is checked like the option: a relative directory from either is refused
      // (exit 2) before anything looks in it.
      ->envname(kSocketDirVariable)
      ->capture_default_str();
}

CLI::Option* add_column_option(CLI::App& command, std::string& column) {
  return command
      .add_option("--column", column,
                  "a CSV's column of closes, by its header's name in any case (e.g. 'Adj Close', PX_LAST); default: "
                  "close, or the only column of a CSV without a header")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (!text.empty() && text.size() <= 255 && text.find_first_of(",\"\n\r") == std::string::npos) return {};
            return fmt::format("'{}' is not a column name: 1..255 characters, no comma, quote or line break", text);
          },
          "NAME"));
}

void add_gbm_options(CLI::App& command, GbmParams& gbm, bool* given) {
  // The bars' range: 8 bytes each, so 1e9 bars is 8 GB; what the host can hold is checked when
  // the series is made (data/series_source.hpp).
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

CLI::Validator strategy_name_or_file() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.find('/') != std::string::npos || text.ends_with(".so")) return text.size() < 4096 ? "" : "the path is too long";
        return strategy_name()(text);
      },
      "NAME or FILE.so");
}

CLI::Validator series_name_or_index() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return !text.empty() && text.size() <= 255 ? "" : "a series is named by 1..255 characters: its name or index";
      },
      "NAME or INDEX");
}

std::string shell_words(int argc, const char* const* argv) {
  std::string line = "ipcfloor";
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("-_./:=,+").find(c) != std::string_view::npos;
    });
    line += ' ';
    if (plain) {
      line += word;
      continue;
    }
    line += '\'';
    for (const char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

}  // namespace ipcfloor
