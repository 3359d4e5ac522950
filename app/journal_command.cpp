#include "app/journal_command.hpp"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli_common.hpp"
#include "common/checksum.hpp"
#include "engine/bar_journal.hpp"
#include "data/series_io.hpp"

namespace ipcfloor {
namespace {

// "2024-05-01 12:00:00 UTC" for a CLOCK_REALTIME in ns; "-" for 0.
std::string utc_text(std::uint64_t unix_ns) {
  if (unix_ns == 0) return "-";
  const auto seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000ULL);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  return std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm) != 0 ? std::string(text) : std::to_string(seconds);
}

nlohmann::json contents_json(const JournalFile& file, const JournalContents& c, std::uint64_t bytes) {
  const std::uint64_t bars = c.closes.size();
  return nlohmann::json{
      {"path", file.path},
      {"bytes", bytes},
      {"created_unix_ns", c.created_unix_ns},
      {"continues", {{"series", c.base.key}, {"source", c.base.description}, {"bars", c.base.bars},
                     {"checksum", fmt::format("{:016x}", c.base.checksum)}}},
      {"bars", bars},
      {"first_bar", bars == 0 ? nlohmann::json(nullptr) : nlohmann::json(c.base.bars)},
      {"last_bar", bars == 0 ? nlohmann::json(nullptr) : nlohmann::json(c.base.bars + bars - 1)},
      {"first_close", bars == 0 ? nlohmann::json(nullptr) : nlohmann::json(c.closes.front())},
      {"last_close", bars == 0 ? nlohmann::json(nullptr) : nlohmann::json(c.closes.back())},
      {"first_tick", c.first_tick},
      {"last_tick", c.last_tick},
      {"series_bars", c.base.bars + bars},
      {"engine_starts", c.start_records},
      {"last_start", {{"pid", c.last_start_pid}, {"unix_ns", c.last_start_unix_ns}}},
      {"torn_bytes", c.torn_bytes},
      {"torn_reason", c.torn_reason},
  };
}

void print_contents(const JournalFile& file, const JournalContents& c, std::uint64_t bytes) {
  fmt::print("journal    {} ({} bytes), made {}\n", file.path, bytes, utc_text(c.created_unix_ns));
  fmt::print("continues  series '{}' ({}: {} bars, checksum {:016x})\n", c.base.key, c.base.description, c.base.bars,
             c.base.checksum);
  if (c.closes.empty()) {
    fmt::print("bars       none\n");
  } else {
    fmt::print("bars       {}: bars {} to {} of the series, first close {}, last close {}\n", c.closes.size(),
               c.base.bars, c.base.bars + c.closes.size() - 1, c.closes.front(), c.closes.back());
  }
  fmt::print("series     {} bars with the preloaded ones\n", c.base.bars + c.closes.size());
  fmt::print("starts     {} engine start{}; the last: pid {} at {}\n", c.start_records, c.start_records == 1 ? "" : "s",
             c.last_start_pid, utc_text(c.last_start_unix_ns));
  if (c.torn_bytes == 0)
    fmt::print("integrity  every record's CRC checks\n");
  else
    fmt::print("integrity  every record's CRC checks but a torn last one: {}; the next engine start drops it\n",
               c.torn_reason);
}

int run_inspect(const JournalOptions& options) {
  auto file = open_journal_file(options.dir, /*lock=*/false);
  if (!file) return report_error("journal inspect", file.error());
  auto contents = read_journal(file->fd.get(), file->path, std::numeric_limits<std::uint64_t>::max());
  if (!contents) return report_error("journal inspect", contents.error());
  struct stat info {};
  const std::uint64_t bytes = ::fstat(file->fd.get(), &info) == 0 ? static_cast<std::uint64_t>(info.st_size) : 0;
  if (options.json) {
    fmt::print("{}\n", contents_json(*file, *contents, bytes).dump(2));
  } else {
    print_contents(*file, *contents, bytes);
  }
  return 0;
}

int run_compact(const JournalOptions& options) {
  auto base = load_series_source(options.source);
  if (!base) return report_error("journal compact", base.error());
  // The lock first: an engine that runs on the journal still appends to it.
  auto file = open_journal_file(options.dir, /*lock=*/true);
  if (!file) return report_error("journal compact", file.error());
  auto contents = read_journal(file->fd.get(), file->path, std::numeric_limits<std::uint64_t>::max());
  if (!contents) return report_error("journal compact", contents.error());
  const std::uint64_t checksum = fnv1a64(std::as_bytes(std::span<const double>(base->close)));
  if (contents->base.bars != base->close.size() || contents->base.checksum != checksum)
    return report_error("journal compact",
                        Error{ErrorCode::bad_data,
                              fmt::format("journal {} continues series '{}' ({}: {} bars, checksum {:016x}), not {} "
                                          "({} bars, checksum {:016x}); give the data it continues",
                                          file->path, contents->base.key, contents->base.description,
                                          contents->base.bars, contents->base.checksum, base->description,
                                          base->close.size(), checksum)});
  std::vector<double> whole = std::move(base->close);
  whole.insert(whole.end(), contents->closes.begin(), contents->closes.end());
  if (auto saved = save_series(options.out_path, whole); !saved) return report_error("journal compact", saved.error());
  const JournalBase continued{whole.size(), fnv1a64(std::as_bytes(std::span<const double>(whole))),
                              std::filesystem::path(options.out_path).stem().string(), options.out_path};
  if (auto over = start_journal_over(options.dir, continued); !over) return report_error("journal compact", over.error());
  fmt::print(stderr, "ipcfloor journal compact: folded the {} bars of {} into {} ({} bars, checksum {:016x}){}; the "
             "journal starts over from there: serve --live --data {} --journal {}\n",
             contents->closes.size(), file->path, options.out_path, whole.size(), continued.checksum,
             contents->torn_bytes == 0 ? "" : fmt::format(" and dropped its torn last record ({})", contents->torn_reason),
             options.out_path, options.dir);
  return 0;
}

}  // namespace

CLI::App* add_journal_subcommand(CLI::App& app, JournalOptions& options) {
  auto* journal = app.add_subcommand("journal", "Show a live engine's journal of appended bars (serve --journal DIR), "
                                                "or fold it into a new data file");
  journal->require_subcommand(1, 1);
  auto* inspect = journal->add_subcommand("inspect", "Show what DIR's journal holds and check every record's CRC");
  inspect->add_option("dir", options.dir, "the journal's directory (serve --journal DIR)")->check(file_path())->required();
  inspect->add_flag("--json", options.json, "print JSON");
  auto* compact = journal->add_subcommand("compact", "Write the data the journal continues and its bars as one new "
                                                     "data file, and start the journal over from it");
  compact->add_option("dir", options.dir, "the journal's directory (serve --journal DIR)")->check(file_path())->required();
  compact->add_option("--data", options.source.data_path,
                      "the data file the engine preloads (serve --data); without it, the generated series --bars, "
                      "--seed ... describe")
      ->check(file_path());
  add_column_option(*compact, options.source.column);
  add_gbm_options(*compact, options.source.gbm);
  compact->add_option("-o,--out", options.out_path, "the new data file: .f64, .csv or .npy")->check(file_path())->required();
  return journal;
}

int run_journal_command(const CLI::App& journal, JournalOptions& options) {
  if (journal.got_subcommand("compact")) return run_compact(options);
  return run_inspect(options);
}

}  // namespace ipcfloor
