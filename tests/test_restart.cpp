// An engine restart loses nothing: the journal of appended bars (its format, its writer thread,
// its replay at start, a torn record, another series, a link, a full disk) and clients that
// re-attach by themselves (the C ABI, `feed --reconnect`, `signals --reconnect`) across a SIGKILL
// and a SIGTERM. The 200-kill crash test and the restart-gap figure are `ipcfloor bench restart`
// (docs/RELIABILITY.md); these are their fast versions.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "cli_harness.hpp"
#include "clients/shm_client.hpp"
#include "common/checksum.hpp"
#include "engine/bar_journal.hpp"
#include "engine/journal_writer.hpp"
#include "ipcfloor/ipcfloor.h"
#include "data/gbm.hpp"
#include "kernel/kernel.hpp"
#include "shm/segment.hpp"

using namespace ipcfloor;
using namespace ipcfloor::cli_test;

namespace {

// True once every thread of process `pid` is in state T (stopped), within `limit`.
bool all_threads_stopped(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  do {
    bool stopped = true;
    for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid))) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const std::size_t paren = line.rfind(')');
      if (paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'T') stopped = false;
    }
    if (stopped) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

std::vector<double> gbm(std::size_t bars, std::uint64_t seed) {
  GbmParams params;
  params.bars = bars;
  params.seed = seed;
  return *generate_gbm(params);
}

void write_f64(const std::string& path, std::span<const double> close) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(close.data()), static_cast<std::streamsize>(close.size_bytes()));
}

bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

bool same_series(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), same_bits);
}

JournalBase base_of(std::span<const double> close, const std::string& key) {
  return {close.size(), fnv1a64(std::as_bytes(close)), key, key + ".f64"};
}

// A journal for `base` in `dir` with room for `room` bars, and a writer on it with `sync`.
struct OpenJournal {
  std::unique_ptr<DataHeader> header = std::make_unique<DataHeader>();
  std::unique_ptr<JournalWriter> writer;
};

OpenJournal start_writer(const std::string& dir, const JournalBase& base, std::uint64_t room, JournalSync sync) {
  auto journal = BarJournal::open({dir, base, room});
  REQUIRE_MESSAGE(journal.has_value(), (journal ? "" : journal.error().message));
  REQUIRE(journal->record_start().has_value());  // as an engine does once it serves
  OpenJournal open;
  JournalWriterConfig config;
  config.sync = sync;
  config.wait = WaitMode::backoff;
  auto writer = JournalWriter::start(std::move(*journal), config, *open.header);
  REQUIRE(writer.has_value());
  open.writer = std::move(*writer);
  return open;
}

// Submits bars [first, first + closes.size()) from this thread as the serving thread would, taking
// each outcome back in order; returns them.
std::vector<JournalOutcome> submit_all(JournalWriter& writer, std::uint64_t first, std::span<const double> closes) {
  std::vector<JournalOutcome> outcomes;
  std::size_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (outcomes.size() < closes.size() && std::chrono::steady_clock::now() < deadline) {
    while (next < closes.size() && writer.has_room()) {
      writer.submit(first + next, closes[next], next);
      ++next;
    }
    JournalOutcome outcome{};
    while (writer.take_finished(outcome)) outcomes.push_back(outcome);
    std::this_thread::yield();
  }
  return outcomes;
}

std::uint64_t file_size(const std::string& path) { return std::filesystem::file_size(path); }

// An engine's data as an observer sees it (no lane): the published series and the journal line.
struct Observed {
  std::vector<double> series;
  std::uint64_t replayed = 0, torn = 0, starts = 0, records = 0;
};

Observed observe(const std::string& name) {
  AttachOptions options;
  options.role = HandoffRole::observer;
  auto segment = Attachment::attach(name, options);
  REQUIRE_MESSAGE(segment.has_value(), (segment ? "" : segment.error().message));
  const auto series = segment->published_series();
  const DataHeader& h = segment->header();
  return {std::vector<double>(series.begin(), series.end()), h.journal_replayed, h.journal_torn_bytes,
          h.journal_starts, h.journal_records.load()};
}

ShmClientOptions backoff_client() {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(10);
  return options;
}

// serve's arguments for a live engine with a journal in `dir` on the data in `data`.
std::vector<std::string> journaled_engine(const std::string& name, const std::string& data, const std::string& dir,
                                          std::size_t capacity, std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--name", name, "--data", data, "--live", "--capacity", std::to_string(capacity),
                                "--journal", dir, "--wait", "backoff", "--hugepages", "off", "--quiet",
                                "--heartbeat-ms", "5"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Waits (10 s at most) for a Background command to exit on its own; its exit code, or -1.
int wait_exit(Background& command) {
  return command.finish(0);  // signal 0 only asks whether it lives: finish() then waits for it
}

}  // namespace

TEST_CASE("a journal record is CRC-framed: flipping any bit of it fails its check; --fsync takes every, "
          "interval:MS and none, each in its range") {
  const JournalRecord record = bar_record(150'000, 101.25, 77);
  CHECK(record_intact(record));
  const auto* bytes = reinterpret_cast<const unsigned char*>(&record);
  for (std::size_t bit = 0; bit < sizeof record * 8; ++bit) {
    JournalRecord flipped = record;
    reinterpret_cast<unsigned char*>(&flipped)[bit / 8] = static_cast<unsigned char>(bytes[bit / 8] ^ (1U << (bit % 8)));
    CHECK_FALSE(record_intact(flipped));
  }
  CHECK(parse_fsync_policy("every")->policy == FsyncPolicy::every);
  CHECK(parse_fsync_policy("none")->policy == FsyncPolicy::none);
  CHECK(parse_fsync_policy("interval:50")->interval == std::chrono::milliseconds(50));
  for (const char* bad : {"interval:0", "interval:60001", "interval:", "interval:5ms", "always", ""}) {
    CAPTURE(bad);
    const auto parsed = parse_fsync_policy(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(contains(parsed.error().message, "every, interval:MS"));
  }
}

TEST_CASE("the journal writer hands 100,000 records through its 1,024 slots in order, every one durable, and the "
          "journal read back holds exactly them; under fsync every a batch is answered once synced") {
  const TempDir dir;
  const std::vector<double> base = gbm(100, 3);
  const std::vector<double> bars = gbm(100'000, 4);
  {
    OpenJournal open = start_writer(dir.path, base_of(base, "base"), 200'000, {FsyncPolicy::none, {}});
    const auto outcomes = submit_all(*open.writer, base.size(), bars);
    REQUIRE(outcomes.size() == bars.size());
    CHECK(std::all_of(outcomes.begin(), outcomes.end(), [](JournalOutcome o) { return o == JournalOutcome::durable; }));
    CHECK(open.header->journal_records.load() == bars.size());
    open.writer->stop();
  }
  {
    OpenJournal open = start_writer(dir.path, base_of(base, "base"), 200'000, {FsyncPolicy::every, {}});
    const auto outcomes = submit_all(*open.writer, base.size() + bars.size(), std::span(bars).first(3000));
    CHECK(std::count(outcomes.begin(), outcomes.end(), JournalOutcome::durable) == 3000);
    CHECK(open.header->journal_last_fsync_unix_ns.load() != 0);
  }
  auto reopened = BarJournal::open({dir.path, base_of(base, "base"), 200'000});
  REQUIRE(reopened.has_value());
  const JournalContents& held = reopened->contents();
  REQUIRE(held.closes.size() == bars.size() + 3000);
  CHECK(same_series(std::span(held.closes).first(bars.size()), bars));
  CHECK(same_series(std::span(held.closes).subspan(bars.size()), std::span(bars).first(3000)));
  CHECK(held.start_records == 2);
  CHECK(held.torn_bytes == 0);
}

TEST_CASE("a torn last record is found by its CRC or its length, dropped and reported; a bad record that good ones "
          "follow is damage and is refused naming its offset") {
  const TempDir dir;
  const std::vector<double> base = gbm(50, 5);
  const std::vector<double> bars = gbm(40, 6);
  {
    OpenJournal open = start_writer(dir.path, base_of(base, "b"), 1000, {FsyncPolicy::every, {}});
    REQUIRE(submit_all(*open.writer, base.size(), bars).size() == bars.size());
  }
  const std::string path = dir.file(kJournalFileName);
  const std::uint64_t whole = file_size(path);
  {  // a write cut short: 17 bytes of a record
    std::ofstream out(path, std::ios::binary | std::ios::app);
    const JournalRecord next = bar_record(base.size() + bars.size(), 99.0, 0);
    out.write(reinterpret_cast<const char*>(&next), 17);
  }
  auto torn = BarJournal::open({dir.path, base_of(base, "b"), 1000});
  REQUIRE_MESSAGE(torn.has_value(), (torn ? "" : torn.error().message));
  CHECK(torn->contents().closes.size() == bars.size());
  CHECK(torn->contents().torn_bytes == 17);
  REQUIRE(torn->notes().size() == 1);
  CHECK(contains(torn->notes()[0], "dropped a torn last record"));
  CHECK(file_size(path) == whole);  // cut back to its last whole record
  torn = std::unexpected(Error{ErrorCode::io, ""});  // closes it (and its lock)
  {  // a whole record whose CRC fails: the last one, so a tear
    JournalRecord bad = bar_record(base.size() + bars.size(), 99.0, 0);
    bad.tick ^= 1;
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out.write(reinterpret_cast<const char*>(&bad), sizeof bad);
  }
  auto crc = BarJournal::open({dir.path, base_of(base, "b"), 1000});
  REQUIRE(crc.has_value());
  CHECK(crc->contents().torn_bytes == kJournalRecordBytes);
  CHECK(contains(crc->notes()[0], "fails its CRC"));
  crc = std::unexpected(Error{ErrorCode::io, ""});
  {  // a record in the middle damaged: refused
    std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
    file.seekp(static_cast<std::streamoff>(kJournalHeaderBytes + 2 * kJournalRecordBytes + 20));
    file.put('\x55');
  }
  auto damaged = BarJournal::open({dir.path, base_of(base, "b"), 1000});
  REQUIRE_FALSE(damaged.has_value());
  CHECK(damaged.error().code == ErrorCode::bad_data);
  CHECK(contains(damaged.error().message, fmt::format("offset {}", kJournalHeaderBytes + 2 * kJournalRecordBytes)));
  CHECK(contains(damaged.error().message, "intact records follow"));
}

TEST_CASE("a journal of another series is refused, naming both series; one with more bars than --capacity leaves "
          "room for is refused naming the capacity") {
  const TempDir dir;
  const std::vector<double> es = gbm(300, 11), nq = gbm(300, 12);
  {
    OpenJournal open = start_writer(dir.path, base_of(es, "ES"), 100, {FsyncPolicy::every, {}});
    REQUIRE(submit_all(*open.writer, es.size(), gbm(50, 13)).size() == 50);
  }
  auto other = BarJournal::open({dir.path, base_of(nq, "NQ"), 100});
  REQUIRE_FALSE(other.has_value());
  const std::string& why = other.error().message;
  CHECK(contains(why, "'ES'"));
  CHECK(contains(why, "'NQ'"));
  CHECK(contains(why, fmt::format("{:016x}", fnv1a64(std::as_bytes(std::span<const double>(es))))));
  CHECK(contains(why, fmt::format("{:016x}", fnv1a64(std::as_bytes(std::span<const double>(nq))))));
  auto small = BarJournal::open({dir.path, base_of(es, "ES"), 20});
  REQUIRE_FALSE(small.has_value());
  CHECK(contains(small.error().message, "--capacity"));
  // The engine says the same and exits before it serves.
  const std::string data = dir.file("NQ.f64");
  write_f64(data, nq);
  const Ran ran = run({"serve", "--name", unique_name("other"), "--data", data, "--live", "--capacity", "1000",
                       "--journal", dir.path, "--hugepages", "off", "--quiet"});
  CHECK(ran.code == 3);
  CHECK(contains(ran.err, "continues series 'ES'"));
  CHECK(contains(ran.err, "preloads series 'NQ'"));
}

TEST_CASE("the journal is made owner-only in its own directory; a link at its name or as its directory, and a "
          "journal others may read, are refused untouched") {
  const TempDir dir;
  const std::vector<double> base = gbm(100, 21);
  const std::string journal_dir = dir.file("j");
  { auto made = BarJournal::open({journal_dir, base_of(base, "b"), 10}); REQUIRE(made.has_value()); }
  struct stat info {};
  REQUIRE(::stat(journal_dir.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  REQUIRE(::stat((journal_dir + "/" + kJournalFileName).c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  // A link at the journal's name, to a file of the user's: never followed, never written.
  const std::string linked = dir.file("linked");
  std::filesystem::create_directory(linked);
  ::chmod(linked.c_str(), 0700);
  const std::string target = dir.file("target");
  { std::ofstream(target) << "not a journal"; }
  std::filesystem::create_symlink(target, linked + "/" + kJournalFileName);
  auto at_name = BarJournal::open({linked, base_of(base, "b"), 10});
  REQUIRE_FALSE(at_name.has_value());
  CHECK(contains(at_name.error().message, "symbolic link"));
  CHECK(file_size(target) == 13);
  // A link as the directory.
  std::filesystem::create_directory_symlink(journal_dir, dir.file("dirlink"));
  auto as_dir = BarJournal::open({dir.file("dirlink"), base_of(base, "b"), 10});
  REQUIRE_FALSE(as_dir.has_value());
  CHECK(contains(as_dir.error().message, "symbolic link"));
  // A journal others may read.
  ::chmod((journal_dir + "/" + kJournalFileName).c_str(), 0644);
  auto open_to_others = BarJournal::open({journal_dir, base_of(base, "b"), 10});
  REQUIRE_FALSE(open_to_others.has_value());
  CHECK(contains(open_to_others.error().message, "chmod 600"));
  // serve refuses the link at the name before it serves.
  const std::string data = dir.file("b.f64");
  write_f64(data, base);
  const Ran ran = run({"serve", "--name", unique_name("link"), "--data", data, "--live", "--journal", linked,
                       "--hugepages", "off", "--quiet"});
  CHECK(ran.code == 4);
  CHECK(contains(ran.err, "symbolic link"));
}

TEST_CASE("journal inspect shows a journal while its engine runs; compact is refused then, and once it stopped folds "
          "the journal into a new data file that an engine preloads whole, replaying nothing") {
  const TempDir dir;
  const std::vector<double> close = gbm(1'300, 81);
  const std::string data = dir.file("base.f64");
  write_f64(data, std::span(close).first(1'000));
  const std::string name = unique_name("compact");
  const std::string journal = dir.file("j");
  {
    Served engine(journaled_engine(name, data, journal, 2'000, {"--fsync", "none"}));
    REQUIRE_MESSAGE(engine.ready(), engine.err());
    auto writer = ShmClient::connect(name, backoff_client());
    REQUIRE(writer.has_value());
    for (std::size_t i = 1'000; i < close.size(); ++i) {
      ResponseSlot answer{};
      REQUIRE(writer->append(close[i], i, answer) == CallStatus::ok);
    }
    const Ran inspect = run({"journal", "inspect", journal, "--json"});
    REQUIRE_MESSAGE(inspect.code == 0, inspect.err);
    const auto shown = nlohmann::json::parse(inspect.out);
    CHECK(shown["bars"] == 300);
    CHECK(shown["first_bar"] == 1'000);
    CHECK(shown["series_bars"] == 1'300);
    CHECK(shown["continues"]["series"] == "base");
    CHECK(shown["engine_starts"] == 1);
    const Ran busy = run({"journal", "compact", journal, "--data", data, "-o", dir.file("whole.f64")});
    CHECK(busy.code == 4);
    CHECK(contains(busy.err, "in use"));
  }
  const Ran other = run({"journal", "compact", journal, "--bars", "1000", "-o", dir.file("whole.f64")});
  CHECK(other.code == 3);
  CHECK(contains(other.err, "continues series 'base'"));
  const Ran compact = run({"journal", "compact", journal, "--data", data, "-o", dir.file("whole.f64")});
  REQUIRE_MESSAGE(compact.code == 0, compact.err);
  Served again(journaled_engine(name, dir.file("whole.f64"), journal, 2'000));
  REQUIRE_MESSAGE(again.ready(), again.err());
  CHECK(again.ready_fields()["bars"] == 1'300);
  const Observed seen = observe(name);
  CHECK(same_series(seen.series, close));
  CHECK(seen.replayed == 0);
}

TEST_CASE("a write the file system refuses is cut back off the journal and answered full, and so is every record "
          "behind it; once there is room the journal takes the next bar where it left off") {
  const TempDir dir;
  const std::vector<double> base = gbm(100, 31);
  const std::vector<double> bars = gbm(600, 32);
  OpenJournal open = start_writer(dir.path, base_of(base, "b"), 10'000, {FsyncPolicy::none, {}});
  REQUIRE(submit_all(*open.writer, base.size(), std::span(bars).first(100)).size() == 100);
  const std::string path = dir.file(kJournalFileName);
  const std::uint64_t size = file_size(path);
  // A file size limit 10 records past the end: EFBIG, as a full disk's ENOSPC, for the writer.
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  const rlimit tight{size + 10 * kJournalRecordBytes, saved.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &tight) == 0);
  const auto outcomes = submit_all(*open.writer, base.size() + 100, std::span(bars).subspan(100, 300));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  REQUIRE(outcomes.size() == 300);
  const auto durable = static_cast<std::size_t>(std::count(outcomes.begin(), outcomes.end(), JournalOutcome::durable));
  CHECK(durable <= 10);
  // Every durable one comes first; every one after the first refusal is refused full.
  const auto first_refused = std::find_if(outcomes.begin(), outcomes.end(), [](JournalOutcome o) { return o != JournalOutcome::durable; });
  CHECK(std::all_of(first_refused, outcomes.end(), [](JournalOutcome o) { return o == JournalOutcome::full; }));
  CHECK(file_size(path) == size + durable * kJournalRecordBytes);  // nothing half written
  CHECK(open.header->journal_state.load() == static_cast<std::uint32_t>(JournalState::full));
  CHECK(open.header->journal_refused.load() == 300 - durable);
  // Room again: the next bar is the one after the last durable one.
  const auto again = submit_all(*open.writer, base.size() + 100 + durable, std::span(bars).subspan(100 + durable, 50));
  CHECK(std::count(again.begin(), again.end(), JournalOutcome::durable) == 50);
  CHECK(open.header->journal_state.load() == static_cast<std::uint32_t>(JournalState::ok));
  open.writer.reset();  // stops the writer and closes the journal (and its lock)
  auto reopened = BarJournal::open({dir.path, base_of(base, "b"), 10'000});
  REQUIRE_MESSAGE(reopened.has_value(), (reopened ? "" : reopened.error().message));
  CHECK(same_series(reopened->contents().closes, std::span(bars).first(150 + durable)));
}

TEST_CASE("journal replay equals the same bars appended live, bit for bit: the series, and every subscription's "
          "signals, pnl and trades, on the serving thread and at the workers") {
  const TempDir dir;
  const std::vector<double> close = gbm(2'500, 41);
  const std::string data = dir.file("live.f64");
  write_f64(data, std::span(close).first(2'000));
  const std::vector<Combo> combos{combo_from_length(6), combo_from_length(20), combo_from_length(77)};
  const std::string name = unique_name("replay");
  std::vector<SignalSlot> last(combos.size());
  {
    // --inline-cost 1: every bar's signal work goes to the worker, after the journal made it durable.
    Served live(journaled_engine(name, data, dir.file("j"), 4'000,
                                 {"--workers", "1", "--inline-cost", "1", "--fsync", "none"}));
    REQUIRE_MESSAGE(live.ready(), live.err());
    auto writer = ShmClient::connect(name, backoff_client());
    auto reader = ShmClient::connect(name, backoff_client());
    REQUIRE(writer.has_value());
    REQUIRE(reader.has_value());
    for (const Combo& combo : combos) {
      ResponseSlot answer{};
      REQUIRE(reader->subscribe(combo, answer) == CallStatus::ok);
      REQUIRE(answer.status == 0);
    }
    for (std::size_t i = 2'000; i < 2'400; ++i) {
      ResponseSlot answer{};
      REQUIRE(writer->append(close[i], i, answer) == CallStatus::ok);
      REQUIRE(answer.status == 0);
      CHECK(answer.trades == static_cast<std::int64_t>(i + 1));
      for (std::size_t k = 0; k < combos.size(); ++k) {
        SignalSlot signal{};
        REQUIRE(reader->wait_signal(signal) == CallStatus::ok);
        REQUIRE(signal.bar == i);
        last[signal.subscription] = signal;
      }
    }
    CHECK(live.stop() == 0);
  }
  Served again(journaled_engine(name, data, dir.file("j"), 4'000, {"--workers", "0"}));
  REQUIRE_MESSAGE(again.ready(), again.err());
  CHECK(again.ready_fields()["published"] == 2'400);
  const Observed seen = observe(name);
  CHECK(same_series(seen.series, std::span(close).first(2'400)));
  CHECK(seen.replayed == 400);
  CHECK(seen.starts == 2);
  auto reader = ShmClient::connect(name, backoff_client());
  REQUIRE(reader.has_value());
  for (std::size_t k = 0; k < combos.size(); ++k) {
    ResponseSlot answer{};
    REQUIRE(reader->subscribe(combos[k], answer) == CallStatus::ok);
    CHECK(answer.trades == last[k].trades);
    CHECK(same_bits(answer.pnl, last[k].pnl));
    CHECK(answer.extra[2] == last[k].position);
  }
  ResponseSlot snapshot{};
  REQUIRE(reader->snapshot(snapshot) == CallStatus::ok);
  for (std::size_t k = 0; k < combos.size(); ++k) {
    SignalSlot signal{};
    REQUIRE(reader->wait_signal(signal) == CallStatus::ok);
    const SignalSlot& before = last[signal.subscription];
    CHECK(signal.bar == before.bar);
    CHECK(same_bits(signal.value[0], before.value[0]));
    CHECK(same_bits(signal.value[1], before.value[1]));
    CHECK(same_bits(signal.pnl, before.pnl));
    CHECK(signal.cross == before.cross);
  }
  // And the bars after it as if there had been no restart: the batch kernel on the whole series.
  auto writer = ShmClient::connect(name, backoff_client());
  REQUIRE(writer.has_value());
  for (std::size_t i = 2'400; i < close.size(); ++i) {
    ResponseSlot answer{};
    REQUIRE(writer->append(close[i], i, answer) == CallStatus::ok);
  }
  const auto batch = run_sweep(builtin(), close, combos, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  std::vector<SignalSlot> final_state(combos.size());
  for (std::size_t n = 0; n < combos.size() * 100; ++n) {
    SignalSlot signal{};
    REQUIRE(reader->wait_signal(signal) == CallStatus::ok);
    final_state[signal.subscription] = signal;
  }
  for (std::size_t k = 0; k < combos.size(); ++k) {
    CHECK(final_state[k].bar == close.size() - 1);
    CHECK(final_state[k].trades == (*batch)[k].trades);
    CHECK(same_bits(final_state[k].pnl, (*batch)[k].pnl));
  }
}

TEST_CASE("a full disk (a small tmpfs) is answered journal_full, the bar not added and nothing lost; once there is "
          "room the next append takes the bar after the last one, and a restart replays exactly the bars answered ok") {
  const TempDir dir;
  const std::string mount = dir.file("small");
  std::filesystem::create_directory(mount);
  if (::mount("tmpfs", mount.c_str(), "tmpfs", 0, "size=96k,mode=0700") != 0) {
    MESSAGE("skipped: mounting a tmpfs needs root (", std::strerror(errno), ")");
    return;
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount};
  const std::vector<double> close = gbm(2'000, 51);
  const std::string data = dir.file("full.f64");
  write_f64(data, std::span(close).first(500));
  const std::string name = unique_name("full");
  std::vector<double> answered(close.begin(), close.begin() + 500);
  {
    Served engine(journaled_engine(name, data, mount + "/j", 1'500));
    REQUIRE_MESSAGE(engine.ready(), engine.err());
    auto writer = ShmClient::connect(name, backoff_client());
    REQUIRE(writer.has_value());
    // Fill the file system: the journal's next page then has nowhere to go.
    {
      std::ofstream filler(mount + "/filler", std::ios::binary);
      const std::vector<char> block(4096, 'x');
      while (filler.write(block.data(), block.size()) && filler.flush()) {
      }
    }
    std::size_t i = 500;
    Status refused = Status::ok;
    for (; i < 1'000 && refused == Status::ok; ++i) {
      ResponseSlot answer{};
      REQUIRE(writer->append(close[i], i, answer) == CallStatus::ok);
      refused = static_cast<Status>(answer.status);
      if (refused == Status::ok) answered.push_back(close[i]);
    }
    REQUIRE(refused == Status::journal_full);
    CHECK(observe(name).series.size() == answered.size());  // the refused bar is not in the series
    std::filesystem::remove(mount + "/filler");
    for (std::size_t k = 0; k < 20; ++k) {
      ResponseSlot answer{};
      REQUIRE(writer->append(close[answered.size()], 0, answer) == CallStatus::ok);
      REQUIRE(answer.status == 0);
      CHECK(answer.trades == static_cast<std::int64_t>(answered.size() + 1));
      answered.push_back(close[answered.size()]);
    }
    CHECK(engine.stop() == 0);
  }
  Served again(journaled_engine(name, data, mount + "/j", 1'500));
  REQUIRE_MESSAGE(again.ready(), again.err());
  CHECK(same_series(observe(name).series, answered));
}

TEST_CASE("feed --reconnect and signals --reconnect outlive a SIGKILL and a systemctl-restart SIGTERM of their "
          "engine: the series ends as the file, without a gap or a duplicate, and each combo's first signal after a "
          "restart says how many bars it missed") {
  const TempDir dir;
  const std::vector<double> close = gbm(2'000, 61);
  const std::string preload = dir.file("pre.f64"), whole = dir.file("whole.f64");
  write_f64(preload, std::span(close).first(1'000));
  write_f64(whole, close);
  const std::string name = unique_name("reattach");
  // --fsync interval:20: an APPEND is answered once written; a SIGKILL loses nothing of it either.
  const auto engine_args = journaled_engine(name, preload, dir.file("j"), 4'000, {"--fsync", "interval:20"});
  std::optional<Served> engine(std::in_place, engine_args);
  REQUIRE_MESSAGE(engine->ready(), engine->err());
  const int no_input = ::open("/dev/null", O_RDONLY);
  Background signals({"signals", "--name", name, "--lengths", "6,20", "--json", "--reconnect", "--reconnect-limit-s",
                      "20"}, no_input);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // subscribed before the first bar
  Background feed({"feed", "--name", name, "--data", whole, "--rate", "1000", "--reconnect", "--reconnect-limit-s",
                   "20"}, no_input);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(engine->pid(), SIGKILL);  // a crash
  engine.reset();
  engine.emplace(engine_args);
  REQUIRE_MESSAGE(engine->ready(), engine->err());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(engine->stop() == 0);  // systemctl restart: SIGTERM, then a new engine
  engine.emplace(engine_args);
  REQUIRE_MESSAGE(engine->ready(), engine->err());
  CHECK(wait_exit(feed) == 0);
  CHECK(contains(feed.err(), "re-attached"));
  const Observed seen = observe(name);
  CHECK(same_series(seen.series, close));  // every bar once, in order
  CHECK(seen.starts == 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the last signals reach the subscriber
  (void)signals.finish(SIGINT);
  ::close(no_input);
  // Each combo's frames: bars go up one at a time, but at a restart, whose frame says what it missed.
  std::map<std::uint32_t, std::uint64_t> last_bar;
  std::map<std::uint32_t, int> restarts;
  std::map<std::uint32_t, nlohmann::json> final_frame;
  for (const std::string& line : lines_of(signals.out())) {
    const auto frame = nlohmann::json::parse(line, nullptr, false);
    REQUIRE_MESSAGE(!frame.is_discarded(), line);
    const auto id = frame["subscription"].get<std::uint32_t>();
    const auto bar = frame["bar"].get<std::uint64_t>();
    if (last_bar.contains(id)) {
      if (frame["restart"].get<bool>()) {
        ++restarts[id];
        const std::uint64_t step = frame["snapshot"].get<bool>() ? 0 : 1;
        CHECK(frame["missed"].get<std::uint64_t>() == bar - last_bar[id] - step);
      } else if (!frame["snapshot"].get<bool>()) {
        CHECK(bar == last_bar[id] + 1);
      }
    }
    last_bar[id] = std::max(last_bar[id], bar);
    final_frame[id] = frame;
  }
  const std::vector<Combo> combos{combo_from_length(6), combo_from_length(20)};
  const auto batch = run_sweep(builtin(), close, combos, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  for (std::uint32_t id = 0; id < 2; ++id) {
    CAPTURE(id);
    CHECK(restarts[id] >= 1);
    CHECK(final_frame[id]["bar"] == close.size() - 1);
    CHECK(final_frame[id]["trades"] == (*batch)[id].trades);
    CHECK(same_bits(final_frame[id]["pnl"].get<double>(), (*batch)[id].pnl));
  }
}

TEST_CASE("a BACKTEST in flight when its engine is SIGKILLed is answered engine_restarted by a client attached "
          "with reconnect, never retried; the client then works on the engine that came back, and its signals "
          "carry the restart and the bars missed") {
  const TempDir dir;
  const std::vector<double> close = gbm(1'500, 71);
  const std::string data = dir.file("bt.f64");
  write_f64(data, std::span(close).first(1'000));
  const std::string name = unique_name("inflight");
  const auto engine_args = journaled_engine(name, data, dir.file("j"), 3'000, {"--workers", "0"});
  std::optional<Served> engine(std::in_place, engine_args);
  REQUIRE_MESSAGE(engine->ready(), engine->err());
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  options.wait = IPCFLOOR_WAIT_BACKOFF;
  options.timeout_ns = 20'000'000'000;
  options.reconnect = 1;
  options.reconnect_limit_ns = 20'000'000'000;
  int err = 0;
  ipcfloor_client* client = ipcfloor_attach_with(name.c_str(), &options, &err);
  REQUIRE_MESSAGE(client != nullptr, ipcfloor_last_error(nullptr));
  const std::int64_t params[6] = {3, 6, 2, 1, 2, 3};
  std::uint32_t id = 0;
  REQUIRE(ipcfloor_subscribe(client, params, &id, nullptr) == IPCFLOOR_OK);
  ipcfloor_client* writer = ipcfloor_attach_with(name.c_str(), &options, &err);
  REQUIRE(writer != nullptr);
  for (std::size_t i = 1'000; i < 1'100; ++i) REQUIRE(ipcfloor_append(writer, close[i], i, nullptr) == IPCFLOOR_OK);
  ipcfloor_signal signal{};
  for (int i = 0; i < 100; ++i) REQUIRE(ipcfloor_wait_signal(client, &signal) == IPCFLOOR_OK);
  CHECK(signal.bar == 1'099);
  // The engine stops answering (SIGSTOP), the call goes out, then the engine dies (SIGKILL).
  REQUIRE(::kill(engine->pid(), SIGSTOP) == 0);
  // kill() returns once the signal is queued: the call goes out only when every thread of the
  // engine is stopped, or a thread still running could answer it.
  REQUIRE_MESSAGE(all_threads_stopped(engine->pid(), std::chrono::seconds(5)), "the engine did not stop");
  std::atomic<int> code{1};
  std::thread caller([&] {
    double pnl = 0;
    std::int64_t trades = 0;
    code = ipcfloor_backtest(client, params, &pnl, &trades);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(code.load() == 1);  // still in flight
  ::kill(engine->pid(), SIGKILL);
  engine.reset();
  engine.emplace(engine_args);
  REQUIRE_MESSAGE(engine->ready(), engine->err());
  caller.join();
  CHECK(code.load() == IPCFLOOR_E_ENGINE_RESTARTED);
  CHECK(contains(ipcfloor_last_error(client), "not retried"));
  CHECK(ipcfloor_restarts(client) == 1);
  CHECK(ipcfloor_engine_pid(client) == engine->pid());
  double pnl = 0;
  std::int64_t trades = 0;
  REQUIRE(ipcfloor_backtest(client, params, &pnl, &trades) == IPCFLOOR_OK);
  Combo combo{};
  std::memcpy(&combo, params, sizeof combo);
  const auto batch = run_sweep(builtin(), std::span(close).first(1'100), std::span<const Combo>(&combo, 1), kDefaultFee, 1);
  REQUIRE(batch.has_value());
  CHECK(trades == (*batch)[0].trades);
  CHECK(same_bits(pnl, (*batch)[0].pnl));
  // The writer finds its engine gone at its next append: the bar is answered engine_restarted, not appended.
  CHECK(ipcfloor_append(writer, close[1'100], 0, nullptr) == IPCFLOOR_E_ENGINE_RESTARTED);
  CHECK(ipcfloor_bars(writer) == 1'100);
  for (std::size_t i = 1'100; i < 1'110; ++i) REQUIRE(ipcfloor_append(writer, close[i], i, nullptr) == IPCFLOOR_OK);
  // The subscriber's next signal is its subscription's first since the restart: the snapshot at bar 1099.
  REQUIRE(ipcfloor_wait_signal(client, &signal) == IPCFLOOR_OK);
  CHECK((signal.flags & IPCFLOOR_SIGNAL_RESTART) != 0);
  CHECK(signal.missed == 0);
  CHECK(signal.bar == 1'099);
  REQUIRE(ipcfloor_wait_signal(client, &signal) == IPCFLOOR_OK);
  CHECK((signal.flags & IPCFLOOR_SIGNAL_RESTART) == 0);
  CHECK(signal.bar == 1'100);
  ipcfloor_detach(writer);
  ipcfloor_detach(client);
}
