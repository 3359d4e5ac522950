// The engine's shared memory at the shm layer alone: what create publishes and an attach
// receives, the name held by a lock and a socket (live, stale, concurrent, foreign,
// untrustworthy), the seals that keep a client from writing or resizing what it receives, a
// fresh lane object per hand-out, an engine that lies in its hand-off, and the host-dependent
// paths (huge pages, mlock limits). A small in-test keeper answers the hand-offs as the engine's
// would. Must pass with and without huge pages configured on the host.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "shm/huge_pages.hpp"
#include "shm/liveness.hpp"
#include "shm/memory_budget.hpp"
#include "shm/name_claim.hpp"
#include "shm/segment.hpp"
#include "tests/fault_harness.hpp"

namespace ipcfloor {
namespace {

std::string unique_name() {
  static int counter = 0;
  return fmt::format("ipcfloor-test-{}-{}", ::getpid(), counter++);
}

std::vector<double> make_series(std::size_t bars) {
  std::vector<double> series(bars);
  for (std::size_t i = 0; i < bars; ++i) series[i] = 100.0 + 0.25 * static_cast<double>(i % 977);
  return series;
}

SegmentConfig make_config(const std::string& name, const std::vector<double>& series) {
  SegmentConfig config;
  config.name = name;
  config.series = series;
  config.series_name = "synthetic test series";
  config.fee = 0.0005;
  config.bulk_bytes = 64 * 1024;
  config.mlock = MlockMode::off;  // the host's RLIMIT_MEMLOCK is not what these tests are about
  return config;
}

// The error's message for a failed Expected, "" for a success.
template <class T>
std::string why(const Expected<T>& result) {
  return result.has_value() ? std::string() : result.error().message;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

AttachOptions as(HandoffRole role) {
  AttachOptions options;
  options.role = role;
  options.timeout = std::chrono::seconds(5);
  return options;
}

// What a keeper is about to send: the reply and the descriptors attached to it.
struct Outgoing {
  HandoffReply reply;
  std::vector<int> fds;
};

// Answers hand-offs on a Segment's socket from a thread, as the engine's keeper does: an observer
// gets the data object, a lane client the data object and a fresh lane object (lanes handed out
// round robin). `tamper`, when given, may rewrite each answer before it goes out: the tests of a
// lying engine use it. Keeps every connection and object alive until destruction.
class TestKeeper {
 public:
  using Tamper = std::function<void(Outgoing&, std::vector<UniqueFd>& keep)>;
  explicit TestKeeper(Segment& segment, Tamper tamper = {})
      : segment_(segment), tamper_(std::move(tamper)), thread_([this] { loop(); }) {}
  TestKeeper(const TestKeeper&) = delete;
  TestKeeper& operator=(const TestKeeper&) = delete;
  ~TestKeeper() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void loop() {
    while (!stop_.load()) {
      pollfd watch{segment_.listen_fd(), POLLIN, 0};
      if (::poll(&watch, 1, 20) <= 0) continue;
      UniqueFd connection(::accept4(segment_.listen_fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!connection) continue;
      HandoffRequest request{};
      auto received = receive_handoff(connection.get(), std::as_writable_bytes(std::span(&request, 1)),
                                      std::chrono::steady_clock::now() + std::chrono::seconds(2));
      if (!received || received->bytes != sizeof request) continue;
      Outgoing out{};
      out.reply.magic = kHandoffMagic;
      out.reply.version = kHandoffVersion;
      out.reply.layout_version = kLayoutVersion;
      out.reply.data_bytes = segment_.size();
      std::snprintf(out.reply.engine, sizeof out.reply.engine, "%s", segment_.name().c_str());
      out.fds.push_back(segment_.data_fd());
      if (request.role == static_cast<std::uint16_t>(HandoffRole::lane)) {
        const std::uint32_t lane = next_lane_++ % segment_.lane_count();
        auto object = segment_.make_lane_object(lane, ++generation_);
        if (!object) continue;
        out.reply.lane = lane;
        out.reply.generation = object->generation();
        out.reply.lane_bytes = object->size();
        out.fds.push_back(object->fd());
        objects_.push_back(std::make_unique<LaneObject>(std::move(*object)));
      }
      if (tamper_) tamper_(out, kept_);
      (void)send_handoff(connection.get(), std::as_bytes(std::span(&out.reply, 1)), out.fds);
      connections_.push_back(std::move(connection));
    }
  }

  Segment& segment_;
  Tamper tamper_;
  std::atomic<bool> stop_{false};
  std::uint32_t next_lane_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<UniqueFd> connections_;
  std::vector<std::unique_ptr<LaneObject>> objects_;
  std::vector<UniqueFd> kept_;  // descriptors a tamper made
  std::thread thread_;
};

// Runs `body` in a forked child and returns what it wrote ("ok" or a failure description).
template <class Body>
std::string in_child(Body body) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    const std::string result = body();
    (void)!::write(pipe_fds[1], result.data(), result.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string result;
  char buffer[512];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) result.append(buffer, static_cast<std::size_t>(got));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  return result;
}

// What a hostile client gets that keeps the descriptors it receives (ipcfloor's own clients close
// them once mapped): a hand-off for `role` asked for by hand, with its descriptors.
struct KeptHandoff {
  UniqueFd connection;
  fault::RawAnswer answer;
};
KeptHandoff ask_keeping_descriptors(const Segment& segment, HandoffRole role) {
  KeptHandoff kept;
  kept.connection = fault::connect_raw(segment.socket_path());
  REQUIRE(kept.connection);
  auto answer = fault::ask_raw(kept.connection.get(), role);
  REQUIRE(answer.has_value());
  REQUIRE(answer->fds.size() == (role == HandoffRole::lane ? 2U : 1U));
  kept.answer = std::move(*answer);
  return kept;
}

// A Unix socket file at `path` that nobody listens on: what a SIGKILLed engine leaves behind.
void leave_dead_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::chmod(path.c_str(), 0600) == 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("create publishes a complete data object that an observer and a lane client read back") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(5000);
  SegmentConfig config = make_config(name, series);
  config.lanes = 3;
  config.ring_capacity = 16;
  config.max_frame_cost = 12345;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  const DataHeader& h = created->header();
  CHECK(h.magic == kDataMagic);
  CHECK(h.state.load() == static_cast<std::uint32_t>(SegmentState::ready));
  CHECK(h.layout_version == kLayoutVersion);
  CHECK(h.lane_count == 3);
  CHECK(h.ring_capacity == 16);
  CHECK(h.n_bars == 5000);
  CHECK(h.fee == 0.0005);
  CHECK(h.max_frame_cost == 12345);
  CHECK(h.engine_pid == ::getpid());
  CHECK(h.engine_start_ticks == process_start_ticks(::getpid()));
  CHECK(h.series_checksum == fnv1a64(std::as_bytes(std::span<const double>(series))));
  CHECK(std::string(h.series_name) == "synthetic test series");
  CHECK(created->socket_path() == handoff_socket_path(default_socket_dir(), name));

  TestKeeper keeper(*created);
  auto observer = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_MESSAGE(observer.has_value(), why(observer));
  CHECK_FALSE(observer->has_lane());
  CHECK(observer->lane_count() == 3);
  CHECK(observer->engine_pid() == ::getpid());
  REQUIRE(observer->series().size() == series.size());
  CHECK(std::equal(series.begin(), series.end(), observer->series().begin()));

  auto client = Attachment::attach(name, as(HandoffRole::lane));
  REQUIRE_MESSAGE(client.has_value(), why(client));
  REQUIRE(client->has_lane());
  const LaneView& view = client->lane().view();
  CHECK(view.header->magic == kLaneMagic);
  CHECK(view.header->ring_capacity == 16);
  CHECK(client->lane().bulk().size() == 64 * 1024);
  CHECK(view.call->slot.request.stamp == 0);  // an idle exchange line at call 0
  CHECK(view.request_ring->produced.load() == 0);
}

TEST_CASE("several series in one segment: each is read back whole, by index and name, with its checksum; "
          "more than the table holds is refused") {
  const std::string name = unique_name();
  const std::vector<double> main_series = make_series(5000);
  const std::vector<double> second = make_series(333);
  std::vector<double> third = make_series(12001);
  for (double& close : third) close *= 2.0;
  SegmentConfig config = make_config(name, main_series);
  config.series_key = "ES";
  config.more_series = {{"NQ", second}, {"CL", third}};
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  CHECK(created->series_count() == 3);
  TestKeeper keeper(*created);
  auto observer = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_MESSAGE(observer.has_value(), why(observer));
  REQUIRE(observer->series_count() == 3);
  const std::vector<const std::vector<double>*> expected = {&main_series, &second, &third};
  const char* keys[] = {"ES", "NQ", "CL"};
  for (std::uint32_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(observer->series_key(i) == keys[i]);
    const auto got = observer->series_at(i);
    REQUIRE(got.size() == expected[i]->size());
    CHECK(std::equal(got.begin(), got.end(), expected[i]->begin()));
    CHECK(observer->header().series_table[i].checksum == fnv1a64(std::as_bytes(got)));
    CHECK(reinterpret_cast<std::uintptr_t>(got.data()) % 64 == 0);
  }

  SegmentConfig too_many = make_config(unique_name(), main_series);
  for (std::uint32_t i = 0; i < kMaxSeries; ++i) too_many.more_series.push_back({fmt::format("S{}", i), second});
  auto refused = Segment::create(too_many);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(contains(refused.error().message, "at most 16"), refused.error().message);
}

TEST_CASE("every column of every series goes into the segment, read-only for clients, where its table says") {
  const std::string name = unique_name();
  const std::vector<double> close = make_series(3001);
  std::vector<double> open(close.size()), high(close.size()), low(close.size()), volume(close.size());
  for (std::size_t i = 0; i < close.size(); ++i) {
    open[i] = close[i] - 0.125;
    high[i] = close[i] + 0.5;
    low[i] = close[i] - 0.75;
    volume[i] = static_cast<double>(i % 17) * 100.0;
  }
  const std::vector<double> second = make_series(77);
  std::vector<double> second_high(second), second_low(second);
  for (double& v : second_high) v += 1.0;
  for (double& v : second_low) v -= 1.0;
  SegmentConfig config = make_config(name, close);
  Bars main_bars(close);
  main_bars.open = open.data();
  main_bars.high = high.data();
  main_bars.low = low.data();
  main_bars.volume = volume.data();
  config.series = main_bars;
  Bars second_bars(second);
  second_bars.high = second_high.data();
  second_bars.low = second_low.data();
  const std::vector<double> third = make_series(10);
  config.more_series = {{"HL", second_bars}, {"C", Bars(third)}};
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  TestKeeper keeper(*created);
  auto observer = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_MESSAGE(observer.has_value(), why(observer));
  const auto same = [](const double* got, const std::vector<double>& want) {
    return got != nullptr && std::equal(want.begin(), want.end(), got);
  };
  const Bars main_read = observer->bars_at(0);
  CHECK(main_read.columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_OPEN | IPCFLOOR_COLUMN_HIGH |
                                IPCFLOOR_COLUMN_LOW | IPCFLOOR_COLUMN_VOLUME));
  CHECK(same(main_read.close.data(), close));
  CHECK(same(main_read.open, open));
  CHECK(same(main_read.high, high));
  CHECK(same(main_read.low, low));
  CHECK(same(main_read.volume, volume));
  CHECK(observer->published_bars().columns() == main_read.columns());
  CHECK(observer->published_bars().size() == close.size());
  const Bars second_read = observer->bars_at(1);
  CHECK(second_read.columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW));
  CHECK(same(second_read.high, second_high));
  CHECK(same(second_read.low, second_low));
  CHECK(second_read.open == nullptr);
  CHECK(second_read.volume == nullptr);
  CHECK(observer->bars_at(2).columns() == IPCFLOOR_COLUMN_CLOSE);
  CHECK(observer->header().series_table[2].column_offset[1] == 0);
  // Each column on a 64-byte boundary, in the data object, which clients map read-only.
  for (const double* column : {main_read.open, main_read.high, main_read.low, main_read.volume, second_read.high,
                               second_read.low}) {
    CHECK(reinterpret_cast<std::uintptr_t>(column) % 64 == 0);
    CHECK(reinterpret_cast<const std::byte*>(column) + sizeof(double) * 77 <=
          reinterpret_cast<const std::byte*>(&observer->header()) + observer->size());
  }
  // The engine's own view is the same.
  CHECK(created->bars_at(1).columns() == second_read.columns());
}

TEST_CASE("the socket is 0600 and ours, the engine leaves no other file, and the socket goes with the engine") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  struct stat info {};
  REQUIRE(::lstat(created->socket_path().c_str(), &info) == 0);
  CHECK(S_ISSOCK(info.st_mode));
  CHECK((info.st_mode & 07777) == 0600);
  CHECK(info.st_uid == ::geteuid());
  // The name is held by an abstract socket, not by a file anyone could delete.
  CHECK_FALSE(path_exists(created->socket_path() + ".lock"));
  const std::string socket = created->socket_path();
  created = std::unexpected(Error{ErrorCode::io, "destroyed"});  // the engine goes: its socket goes
  CHECK_FALSE(path_exists(socket));
}

TEST_CASE("a name held by a live engine is refused with busy, naming its pid") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  auto second = Segment::create(make_config(name, series));
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == ErrorCode::busy);
  CHECK_MESSAGE(contains(second.error().message, fmt::format("is running (pid {})", ::getpid())), second.error().message);
  auto removed = Segment::remove_stale(name, default_socket_dir());
  REQUIRE_FALSE(removed.has_value());
  CHECK(removed.error().code == ErrorCode::busy);
  CHECK(path_exists(created->socket_path()));
}

TEST_CASE("the socket a dead engine left is replaced with a warning, and remove_stale clears it") {
  const std::string name = unique_name();
  const std::string path = handoff_socket_path(default_socket_dir(), name);
  leave_dead_socket(path);
  auto gone = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_FALSE(gone.has_value());
  CHECK(gone.error().code == ErrorCode::peer_gone);
  CHECK(contains(gone.error().message, "nobody listens"));

  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  REQUIRE(created->warnings().size() >= 1);
  CHECK(contains(created->warnings().front(), "replacing the stale socket"));
  created = std::unexpected(Error{ErrorCode::io, "destroyed"});

  leave_dead_socket(path);
  REQUIRE(Segment::remove_stale(name, default_socket_dir()).has_value());
  CHECK_FALSE(path_exists(path));
  CHECK(Segment::remove_stale(name, default_socket_dir()).has_value());  // nothing there: fine
}

TEST_CASE("concurrent creators of one name: exactly one wins, also over a dead engine's socket") {
  const std::string name = unique_name();
  const std::string path = handoff_socket_path(default_socket_dir(), name);
  const auto race = [&] {
    constexpr int kCreators = 4;
    std::vector<pid_t> children;
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    for (int i = 0; i < kCreators; ++i) {
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        ::close(pipe_fds[0]);
        {
          const std::vector<double> series = make_series(100);
          auto created = Segment::create(make_config(name, series));
          const char verdict = created ? 'W' : created.error().code == ErrorCode::busy ? 'B' : 'E';
          (void)!::write(pipe_fds[1], &verdict, 1);
          // The winner holds the name until every loser has tried, then lets go of it as an
          // engine that stops does.
          if (created) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        ::_exit(0);
      }
      children.push_back(child);
    }
    ::close(pipe_fds[1]);
    std::string verdicts;
    char c = 0;
    while (::read(pipe_fds[0], &c, 1) == 1) verdicts.push_back(c);
    ::close(pipe_fds[0]);
    for (const pid_t child : children) ::waitpid(child, nullptr, 0);
    CAPTURE(verdicts);
    CHECK(verdicts.size() == kCreators);
    CHECK(std::count(verdicts.begin(), verdicts.end(), 'W') == 1);
    CHECK(std::count(verdicts.begin(), verdicts.end(), 'B') == kCreators - 1);
  };
  SUBCASE("on a free name") { race(); }
  SUBCASE("over the socket a SIGKILLed engine left") {
    const pid_t dead = ::fork();
    REQUIRE(dead >= 0);
    if (dead == 0) {
      const std::vector<double> series = make_series(100);
      auto created = Segment::create(make_config(name, series));
      if (!created) ::_exit(1);
      ::raise(SIGKILL);  // no destructor: the socket stays behind
    }
    ::waitpid(dead, nullptr, 0);
    REQUIRE(path_exists(path));
    race();
  }
  // Every winner removed what it made; the stale socket went with the first winner's start.
  CHECK_FALSE(path_exists(path));
}

TEST_CASE("something at the name that is not an ipcfloor socket is refused and left untouched") {
  const std::string name = unique_name();
  const std::string path = handoff_socket_path(default_socket_dir(), name);
  {
    std::ofstream junk(path);
    junk << "an older segment, or someone else's file";
  }
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_FALSE(created.has_value());
  CHECK(created.error().code == ErrorCode::permission);
  CHECK(contains(created.error().message, "not an ipcfloor socket"));
  auto attached = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().code == ErrorCode::permission);
  CHECK(path_exists(path));
  ::unlink(path.c_str());
}

TEST_CASE("attach refuses a socket whose mode no engine gives it (0600, or 0666 when it admits others), without "
          "talking to it") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  for (const mode_t mode : {0660, 0644, 0606}) {
    CAPTURE(mode);
    REQUIRE(::chmod(created->socket_path().c_str(), mode) == 0);
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK(contains(attached.error().message, fmt::format("mode {:04o}", mode)));
  }
}

TEST_CASE("an engine that admits other users makes its socket 0666 and serves its own user as before") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  SegmentConfig config = make_config(name, series);
  const std::vector<std::string> users{"65534"};
  auto peers = PeerPolicy::make(users, {});
  REQUIRE(peers.has_value());
  config.peers = *peers;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  struct stat info {};
  REQUIRE(::stat(created->socket_path().c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0666);
  CHECK(created->peers().admits_others());
  CHECK(contains(created->peers().describe(), "uid 65534"));
}

TEST_CASE("a FIFO or a directory at the name is refused at once and left untouched") {
  const std::string name = unique_name();
  const std::string path = handoff_socket_path(default_socket_dir(), name);
  const std::vector<double> series = make_series(100);
  for (const char* kind : {"fifo", "directory"}) {
    CAPTURE(kind);
    // A FIFO nobody writes would block an open(2) forever: refusing it must not open it.
    if (std::string_view(kind) == "fifo") REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    if (std::string_view(kind) == "directory") REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    auto created = Segment::create(make_config(name, series));
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::permission);
    CHECK(contains(created.error().message, path));
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK(contains(attached.error().message, "is not a socket"));
    CHECK(path_exists(path));
    ::rmdir(path.c_str());
    ::unlink(path.c_str());
  }
}

TEST_CASE("a socket or a name claim of another uid is refused and left untouched") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can give a file away");
    return;
  }
  constexpr uid_t kNobody = 65534;
  const std::vector<double> series = make_series(100);
  SUBCASE("the live engine's socket") {
    const std::string name = unique_name();
    auto created = Segment::create(make_config(name, series));
    REQUIRE_MESSAGE(created.has_value(), why(created));
    TestKeeper keeper(*created);
    REQUIRE(::chown(created->socket_path().c_str(), kNobody, static_cast<gid_t>(-1)) == 0);
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK(contains(attached.error().message, fmt::format("owned by uid {}", kNobody)));
    CHECK(contains(attached.error().message, "(mode 0600); this client trusts only engines of uid"));
    CHECK(contains(attached.error().message, fmt::format("set IPCFLOOR_ENGINE_UID={}", kNobody)));
    CHECK(path_exists(created->socket_path()));
  }
  SUBCASE("a dead engine's socket") {
    const std::string name = unique_name();
    const std::string path = handoff_socket_path(default_socket_dir(), name);
    leave_dead_socket(path);
    REQUIRE(::chown(path.c_str(), kNobody, static_cast<gid_t>(-1)) == 0);
    auto created = Segment::create(make_config(name, series));
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::permission);
    CHECK(contains(created.error().message, fmt::format("a socket of uid {}", kNobody)));
    CHECK(contains(created.error().message, "only replaces its own sockets"));
    CHECK(path_exists(path));  // not ours to remove
    ::unlink(path.c_str());
  }
  SUBCASE("our claim address, bound first by a process of another uid") {
    // Abstract socket addresses carry no permissions: another user can squat on ours. The
    // engine must refuse, saying the name is held and how to find by whom, and take nothing over.
    const std::string name = unique_name();
    struct stat dir {};
    REQUIRE(prepare_socket_dir(default_socket_dir()).has_value());
    REQUIRE(::stat(default_socket_dir().c_str(), &dir) == 0);
    const std::string address = claim_address(::geteuid(), dir.st_dev, dir.st_ino, name);
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t squatter = ::fork();
    REQUIRE(squatter >= 0);
    if (squatter == 0) {
      if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(1);
      const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
      sockaddr_un bound{};
      bound.sun_family = AF_UNIX;
      std::memcpy(bound.sun_path + 1, address.data(), address.size());
      const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + address.size());
      const char verdict = ::bind(fd, reinterpret_cast<const sockaddr*>(&bound), length) == 0 ? 'B' : 'E';
      (void)!::write(ready[1], &verdict, 1);
      ::pause();  // holds the address until killed
      ::_exit(0);
    }
    ::close(ready[1]);
    char verdict = 0;
    REQUIRE(::read(ready[0], &verdict, 1) == 1);
    ::close(ready[0]);
    REQUIRE(verdict == 'B');
    auto created = Segment::create(make_config(name, series));
    ::kill(squatter, SIGKILL);
    ::waitpid(squatter, nullptr, 0);
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::busy);
    CHECK_MESSAGE(contains(created.error().message, "@" + address), created.error().message);
    CHECK_FALSE(path_exists(handoff_socket_path(default_socket_dir(), name)));
    // Killed, the squatter's address is free at once: the name is ours to take.
    auto taken = Segment::create(make_config(name, series));
    CHECK_MESSAGE(taken.has_value(), why(taken));
  }
}

// A sealed copy of the data object behind `data_fd`, `bytes` long (a sparse tail past the
// original), with its header saying `bytes` and, with `flip`, one byte of the series changed.
int lying_copy(int data_fd, std::size_t original, std::size_t bytes, bool flip, std::vector<UniqueFd>& keep) {
  UniqueFd fd(::memfd_create("ipcfloor-test-lie", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(fd);
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(bytes)) == 0);
  std::vector<std::byte> head(original);
  REQUIRE(::pread(data_fd, head.data(), original, 0) == static_cast<ssize_t>(original));
  auto* header = reinterpret_cast<DataHeader*>(head.data());
  header->data_bytes = bytes;
  if (flip) head[header->series_offset] ^= std::byte{1};
  REQUIRE(::pwrite(fd.get(), head.data(), original, 0) == static_cast<ssize_t>(original));
  REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) == 0);
  const int raw = fd.get();
  keep.push_back(std::move(fd));
  return raw;
}

TEST_CASE("a lying engine's sparse data object larger than the client may have is refused before it is mapped") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The attach runs in a child capped at 4 GiB of address space, which a sanitizer runtime's
  // shadow memory alone exceeds: the release build runs this case.
  MESSAGE("skipped: a sanitizer runtime cannot start under the child's address-space cap");
  return;
#endif
  const std::vector<double> series = make_series(1000);
  const std::string name = unique_name();
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  // 8 GiB past what this host says it can give: a header consistent with the object, a sealed
  // memfd, and holes where the pages should be.
  const HostMemory host = read_host_memory();
  REQUIRE(host.available.has_value());
  const std::size_t lie = static_cast<std::size_t>(host.available->bytes) + (std::size_t{8} << 30);
  const std::size_t original = created->size();
  TestKeeper keeper(*created, [&](Outgoing& out, std::vector<UniqueFd>& keep) {
    out.fds[0] = lying_copy(out.fds[0], original, lie, false, keep);
    out.reply.data_bytes = lie;
  });
  // In a child under a 4 GiB address space: if the client mapped the object, it fails there
  // ("cannot map") instead of taking the host's memory.
  const std::string verdict = in_child([&] {
    const rlimit four_gib{rlim_t{4} << 30, rlim_t{4} << 30};
    ::setrlimit(RLIMIT_AS, &four_gib);
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    if (attached) return std::string("attached");
    return fmt::format("{} {}", static_cast<int>(attached.error().code), attached.error().message);
  });
  CHECK_MESSAGE(verdict.starts_with(fmt::format("{} ", static_cast<int>(ErrorCode::resource))), verdict);
  CHECK_MESSAGE(verdict.find("refusing a sparse object") != std::string::npos, verdict);
  CHECK_MESSAGE(verdict.find("MemAvailable") != std::string::npos, verdict);
}

TEST_CASE("an attach for status reads no series: it trusts the recorded checksum, where a client's attach hashes") {
  const std::vector<double> series = make_series(1000);
  const std::string name = unique_name();
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  const std::size_t original = created->size();
  TestKeeper keeper(*created, [&](Outgoing& out, std::vector<UniqueFd>& keep) {
    out.fds[0] = lying_copy(out.fds[0], original, original, true, keep);  // one series byte changed
  });
  auto hashed = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_FALSE(hashed.has_value());
  CHECK_MESSAGE(contains(hashed.error().message, "hashes to"), hashed.error().message);
  AttachOptions status = as(HandoffRole::observer);
  status.verify_series = false;
  auto trusted = Attachment::attach(name, status);
  CHECK_MESSAGE(trusted.has_value(), why(trusted));
}

TEST_CASE("a lying engine's hand-off is refused before anything is mapped: unsealed, resized or extra "
          "objects, a reply that disagrees with the object") {
  const std::vector<double> series = make_series(1000);
  // A memfd like the engine's but without its seals: a client must not map an object that can
  // be shrunk under it (a SIGBUS on its next read) or, for the data, written by someone else.
  const auto unsealed = [](std::size_t bytes, std::vector<UniqueFd>& keep) {
    UniqueFd fd(::memfd_create("ipcfloor-test-unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    REQUIRE(fd);
    REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(bytes)) == 0);
    const int raw = fd.get();
    keep.push_back(std::move(fd));
    return raw;
  };
  struct Lie {
    const char* what;
    HandoffRole role;
    TestKeeper::Tamper tamper;
    const char* says;
  };
  const std::vector<Lie> lies{
      {"an unsealed data object", HandoffRole::observer,
       [&](Outgoing& out, std::vector<UniqueFd>& keep) { out.fds[0] = unsealed(out.reply.data_bytes, keep); },
       "is not sealed"},
      {"an unsealed lane object", HandoffRole::lane,
       [&](Outgoing& out, std::vector<UniqueFd>& keep) { out.fds[1] = unsealed(out.reply.lane_bytes, keep); },
       "is not sealed"},
      {"a data object of another size than announced", HandoffRole::observer,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.reply.data_bytes += 4096; }, "but the engine announced"},
      {"the lane object in place of the data object", HandoffRole::lane,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.fds[0] = out.fds[1]; }, "holds"},
      {"a lane for an observer", HandoffRole::observer,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.fds.push_back(out.fds[0]); }, "descriptors"},
      {"no lane object for a client", HandoffRole::lane,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.fds.pop_back(); }, "descriptors"},
      {"a lane beyond the header's lane count", HandoffRole::lane,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.reply.lane = kMaxLanes; }, "granted lane"},
      {"a lane object of another generation than the reply", HandoffRole::lane,
       [](Outgoing& out, std::vector<UniqueFd>&) { out.reply.generation += 1; }, "does not match its hand-off"},
  };
  for (const Lie& lie : lies) {
    CAPTURE(lie.what);
    const std::string name = unique_name();
    auto created = Segment::create(make_config(name, series));
    REQUIRE_MESSAGE(created.has_value(), why(created));
    TestKeeper keeper(*created, lie.tamper);
    auto attached = Attachment::attach(name, as(lie.role));
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::protocol);
    CHECK_MESSAGE(contains(attached.error().message, lie.says), attached.error().message);
  }
}

TEST_CASE("attach names the missing engine and how to start one") {
  const std::string name = unique_name();
  auto attached = Attachment::attach(name, as(HandoffRole::lane));
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().code == ErrorCode::peer_gone);
  CHECK(contains(attached.error().message, handoff_socket_path(default_socket_dir(), name)));
  CHECK(contains(attached.error().message, "ipcfloor serve --name " + name));
}

TEST_CASE("a client cannot write, shrink, grow or punch the data object it received, however it opens it") {
  const std::vector<double> series = make_series(1000);
  // Both backings: the seals are enforced by shmem and by hugetlbfs separately.
  std::vector<HugePagesMode> backings{HugePagesMode::off};
  if (huge_page_budget().available >= 2) backings.push_back(HugePagesMode::required);
  for (const HugePagesMode backing : backings) {
    CAPTURE(to_string(backing));
    const std::string name = unique_name();
    SegmentConfig config = make_config(name, series);
    config.hugepages = backing;
    auto created = Segment::create(config);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    TestKeeper keeper(*created);
    auto client = Attachment::attach(name, as(HandoffRole::lane));
    REQUIRE_MESSAGE(client.has_value(), why(client));
    const bool huge = client->backing() == Backing::memfd_huge_2m;
    CHECK(huge == (backing == HugePagesMode::required));
    const KeptHandoff kept = ask_keeping_descriptors(*created, HandoffRole::observer);
    const int fd = kept.answer.fds[0].get();
    const std::size_t bytes = client->size();
    const std::size_t page = huge ? kHugePageBytes : kSmallPageBytes;
    // Opening the object afresh for writing is allowed (it is a file open, not a write): the
    // seals bind the object, so they hold for the new descriptor just as for the received one.
    const UniqueFd reopened(::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE_MESSAGE(reopened, "cannot reopen /proc/self/fd/" << fd << ": " << std::strerror(errno));
    for (const int each : {fd, reopened.get()}) {
      CAPTURE(each);
      errno = 0;
      CHECK(::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, each, 0) == MAP_FAILED);
      CHECK(errno == EPERM);
      // Sizes the backing could take (whole pages), so that only the seals say no.
      for (const std::size_t size : {std::size_t{0}, bytes - page, bytes + page}) {
        CAPTURE(size);
        errno = 0;
        CHECK(::ftruncate(each, static_cast<off_t>(size)) != 0);
        CHECK(errno == EPERM);
      }
      const char byte = 1;
      errno = 0;
      CHECK(::pwrite(each, &byte, 1, 0) != 1);
      CHECK(errno == (huge ? EINVAL : EPERM));  // hugetlbfs has no write(2) at all
      CHECK(::fallocate(each, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(page)) != 0);
      CHECK(static_cast<std::size_t>(::lseek(each, 0, SEEK_END)) == bytes);
    }
    void* mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(mapped != MAP_FAILED);
    CHECK(::mprotect(mapped, bytes, PROT_READ | PROT_WRITE) != 0);
    CHECK(::madvise(mapped, page, MADV_REMOVE) != 0);  // punching through a mapping: refused too
    ::munmap(mapped, bytes);
    // Nor through /proc/self/mem, which writes past page protections where the kernel lets it: a
    // read-only shared mapping of a sealed object is not such a place.
    {
      const UniqueFd memory(::open("/proc/self/mem", O_RDWR | O_CLOEXEC));
      REQUIRE(memory);
      const std::uint32_t forged = 0;
      const auto state_at = reinterpret_cast<std::uintptr_t>(&client->header().state);
      CHECK(::pwrite(memory.get(), &forged, sizeof forged, static_cast<off_t>(state_at)) != sizeof forged);
      CHECK(client->header().state.load() == static_cast<std::uint32_t>(SegmentState::ready));
    }
    // The received object is the engine's, unchanged.
    CHECK(client->series()[0] == series[0]);
    CHECK(created->header().series_checksum == fnv1a64(std::as_bytes(client->series())));
  }
}

TEST_CASE("a lane object is writable by its client but cannot be truncated or grown") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(1000);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  TestKeeper keeper(*created);
  const KeptHandoff kept = ask_keeping_descriptors(*created, HandoffRole::lane);
  const int fd = kept.answer.fds[1].get();
  const auto bytes = static_cast<std::size_t>(kept.answer.reply.lane_bytes);
  errno = 0;
  CHECK(::ftruncate(fd, 4096) != 0);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, static_cast<off_t>(bytes * 2)) != 0);
  CHECK(static_cast<std::size_t>(::lseek(fd, 0, SEEK_END)) == bytes);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* bulk = static_cast<std::byte*>(mapped) + created->geometry().lane_bulk_offset;
  bulk[0] = std::byte{42};  // its own memory: writable
  CHECK(bulk[0] == std::byte{42});
  ::munmap(mapped, bytes);
  // The seals cannot be lifted or added to: F_SEAL_SEAL is set.
  CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);
  CHECK((::fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
        (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
}

TEST_CASE("every lane hand-out is a fresh zeroed object that no earlier client's mapping reaches") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(1000);
  SegmentConfig config = make_config(name, series);
  config.lanes = 1;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  TestKeeper keeper(*created);
  auto first = Attachment::attach(name, as(HandoffRole::lane));
  REQUIRE_MESSAGE(first.has_value(), why(first));
  std::byte* old_bulk = first->lane().bulk().data();
  std::memset(old_bulk, 0x5a, 4096);
  first->lane().view().request_ring->produced.store(12345);
  first->release();  // the mapping stays in this process
  auto second = Attachment::attach(name, as(HandoffRole::lane));
  REQUIRE_MESSAGE(second.has_value(), why(second));
  CHECK(second->lane().lane() == first->lane().lane());
  CHECK(second->lane().generation() > first->lane().generation());
  CHECK(second->lane().bulk()[0] == std::byte{0});
  CHECK(second->lane().view().request_ring->produced.load() == 0);
  std::memset(old_bulk, 0x77, 4096);  // the old mapping is not the new object
  CHECK(second->lane().bulk()[0] == std::byte{0});
}

TEST_CASE("attach refuses data of another layout version, not ready, or with a corrupt series") {
  const std::vector<double> series = make_series(1000);
  for (const char* fault : {"version", "building", "checksum"}) {
    CAPTURE(fault);
    const std::string name = unique_name();
    auto created = Segment::create(make_config(name, series));
    REQUIRE_MESSAGE(created.has_value(), why(created));
    DataHeader& header = created->header();  // the engine's own, writable mapping
    if (std::string_view(fault) == "version") header.layout_version = kLayoutVersion - 1;
    if (std::string_view(fault) == "building") header.state.store(static_cast<std::uint32_t>(SegmentState::building));
    if (std::string_view(fault) == "checksum") header.series_checksum ^= 1;
    TestKeeper keeper(*created);
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    REQUIRE_FALSE(attached.has_value());
    if (std::string_view(fault) == "version") {
      CHECK(attached.error().code == ErrorCode::version_mismatch);
      CHECK(contains(attached.error().message, fmt::format("version {}", kLayoutVersion - 1)));
    } else {
      CHECK(attached.error().code == ErrorCode::protocol);
    }
  }
}

TEST_CASE("a stopping engine is reported gone to a new attach") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  created->mark_stopping();
  TestKeeper keeper(*created);
  auto attached = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().code == ErrorCode::peer_gone);
  CHECK(contains(attached.error().message, "stopping"));
}

TEST_CASE("rejects bad configurations and names") {
  const std::vector<double> series = make_series(100);
  const std::vector<double> empty;
  SegmentConfig config = make_config(unique_name(), series);
  for (const char* bad : {"", ".", "..", "a/b", "with space", "x\n"}) {
    config.name = bad;
    auto created = Segment::create(config);
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::invalid_argument);
    CHECK_FALSE(valid_segment_name(bad));
  }
  config.name = unique_name();
  config.lanes = 0;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.lanes = kMaxLanes + 1;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.lanes = 2;
  config.ring_capacity = 6;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.ring_capacity = 8;
  config.series = empty;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.series = series;
  config.bulk_bytes = kMaxBulkBytes + 1;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.bulk_bytes = 0;
  config.socket_dir = "relative/dir";
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.socket_dir = "/nonexistent-ipcfloor-dir";
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  CHECK(valid_segment_name("ipcfloor-demo_1.2"));
}

// ---------------------------------------------------------------------------------------------
// The name: held by the kernel, per uid, directory and name

TEST_CASE("the claim address names the uid, the directory's identity and the name, and fits a socket address") {
  const std::string short_name = claim_address(1000, 0x2a, 0x1234, "demo");
  CHECK(short_name == "ipcfloor/1000/2a.1234/demo");
  CHECK(claim_address(1000, 0x2a, 0x1235, "demo") != short_name);  // another directory
  CHECK(claim_address(1001, 0x2a, 0x1234, "demo") != short_name);  // another user
  const std::string long_name(kMaxSegmentNameBytes, 'n');
  const std::string hashed = claim_address(4294967294U, ~dev_t{0}, ~ino_t{0}, long_name);
  CHECK(hashed.size() + 1 <= sizeof(sockaddr_un::sun_path));  // + the NUL that makes it abstract
  CHECK(hashed.find('#') != std::string::npos);
  CHECK(hashed != claim_address(4294967294U, ~dev_t{0}, ~ino_t{0}, long_name.substr(1) + "m"));
}

TEST_CASE("removing the files of a live engine frees nothing: its name stays held, and its stop removes no one "
          "else's socket") {
  const std::vector<double> series = make_series(100);
  const std::string name = unique_name();
  auto first = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(first.has_value(), why(first));
  const std::string path = first->socket_path();
  REQUIRE(::unlink(path.c_str()) == 0);  // everything the engine has in the directory
  auto second = Segment::create(make_config(name, series));
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == ErrorCode::busy);
  CHECK_MESSAGE(contains(second.error().message, "removed by hand"), second.error().message);
  CHECK_FALSE(path_exists(path));  // and it made nothing there
  // A socket someone else puts at the path is not the first engine's to remove when it stops.
  leave_dead_socket(path);
  struct stat planted {};
  REQUIRE(::lstat(path.c_str(), &planted) == 0);
  first = std::unexpected(Error{ErrorCode::io, "stopped"});
  struct stat after {};
  REQUIRE(::lstat(path.c_str(), &after) == 0);
  CHECK(after.st_ino == planted.st_ino);
  // The name is free now: the next engine replaces that (dead) socket with its own.
  auto third = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(third.has_value(), why(third));
  REQUIRE(::lstat(path.c_str(), &after) == 0);
  CHECK(after.st_ino != planted.st_ino);
  CHECK(contains(third->warnings().front(), "replacing the stale socket"));
}

TEST_CASE("one name in two directories is two names; two spellings of one directory are one") {
  const std::vector<double> series = make_series(100);
  const std::string name = unique_name();
  char first_template[] = "/tmp/ipcfloor-claim-XXXXXX";
  char second_template[] = "/tmp/ipcfloor-claim-XXXXXX";
  REQUIRE(::mkdtemp(first_template) != nullptr);
  REQUIRE(::mkdtemp(second_template) != nullptr);
  const std::string first_dir = first_template, second_dir = second_template;
  const std::string alias = first_dir + "-alias";
  REQUIRE(::symlink(first_dir.c_str(), alias.c_str()) == 0);
  {
    SegmentConfig config = make_config(name, series);
    config.socket_dir = first_dir;
    auto first = Segment::create(config);
    REQUIRE_MESSAGE(first.has_value(), why(first));
    config.socket_dir = second_dir;
    auto second = Segment::create(config);
    CHECK_MESSAGE(second.has_value(), why(second));
    config.socket_dir = alias;
    auto aliased = Segment::create(config);
    REQUIRE_FALSE(aliased.has_value());
    CHECK(aliased.error().code == ErrorCode::busy);
  }
  ::unlink(alias.c_str());
  std::filesystem::remove_all(first_dir);
  std::filesystem::remove_all(second_dir);
}

// ---------------------------------------------------------------------------------------------
// What a client keeps

namespace {

// Descriptors of this process that are ipcfloor memfds.
int ipcfloor_memfds() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.starts_with("/memfd:ipcfloor:")) ++count;
  }
  return count;
}

}  // namespace

TEST_CASE("an attachment keeps no descriptor of the objects it mapped") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(1000);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  TestKeeper keeper(*created);
  const int before = ipcfloor_memfds();  // the engine's own data object
  auto observer = Attachment::attach(name, as(HandoffRole::observer));
  REQUIRE_MESSAGE(observer.has_value(), why(observer));
  CHECK(ipcfloor_memfds() == before);
  CHECK(observer->series()[0] == series[0]);  // mapped all the same
  CHECK_FALSE(observer->engine_hung_up());    // told by the engine's pid, not by a connection
  auto client = Attachment::attach(name, as(HandoffRole::lane));
  REQUIRE_MESSAGE(client.has_value(), why(client));
  // The keeper made one lane object (its own descriptor); the client kept neither it nor the data.
  CHECK(ipcfloor_memfds() == before + 1);
  CHECK(client->lane().fd() < 0);
  CHECK(client->lane().view().header->magic == kLaneMagic);
  CHECK_FALSE(client->engine_hung_up());  // its lease, the one descriptor it keeps
}

// ---------------------------------------------------------------------------------------------
// Memory: the verdict is a pure function of the sizes and the host's stated limits

TEST_CASE("the memory check refuses what the tightest stated limit cannot back, naming the option and the limit") {
  const std::vector<MemoryNeed> needs{{"the data object", 1ULL << 30, "--capacity 134217728"},
                                      {"5 lane objects", 3ULL << 20, "--bulk-bytes 2621440 or --lanes 4"}};
  HostMemory host;
  CHECK(check_memory_budget(needs, host).has_value());  // no limit stated: nothing to refuse on
  host.available = MemoryLimit{2ULL << 30, "MemAvailable in /proc/meminfo"};
  CHECK(check_memory_budget(needs, host).has_value());
  host.available->bytes = (1ULL << 30) + (3ULL << 20) - 1;  // one byte short
  auto refused = check_memory_budget(needs, host);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource);
  CHECK_MESSAGE(contains(refused.error().message, "MemAvailable in /proc/meminfo"), refused.error().message);
  CHECK(contains(refused.error().message, "lower --capacity 134217728"));  // the largest need's option
  CHECK(contains(refused.error().message, "1.0 GiB"));
  // A cgroup that leaves less is the limit named.
  host.cgroup = MemoryLimit{512ULL << 20, "the cgroup limit in /x/memory.max (512.0 MiB, 0 bytes of it in use)"};
  refused = check_memory_budget(needs, host);
  REQUIRE_FALSE(refused.has_value());
  CHECK_MESSAGE(contains(refused.error().message, "the cgroup limit in /x/memory.max"), refused.error().message);
  CHECK(contains(refused.error().message, "allows 512.0 MiB more"));
  // Sizes that would overflow a sum are refused, not wrapped into something small.
  const std::vector<MemoryNeed> huge{{"a", ~0ULL, "--a"}, {"b", ~0ULL, "--b"}};
  CHECK_FALSE(check_memory_budget(huge, host).has_value());
}

TEST_CASE("the tightest cgroup is the one with the least left, page cache it can drop counted as free") {
  std::vector<CgroupLevel> levels{
      {"/leaf/memory.max", std::nullopt, 100, 0},                // no limit
      {"/mid/memory.max", 1000ULL << 20, 900ULL << 20, 600ULL << 20},  // 700 MiB left: cache can go
      {"/top/memory.max", 800ULL << 20, 200ULL << 20, 0},        // 600 MiB left
  };
  const auto tightest = tightest_cgroup_limit(levels);
  REQUIRE(tightest.has_value());
  CHECK(tightest->bytes == 600ULL << 20);
  CHECK(contains(tightest->source, "/top/memory.max"));
  levels[2].usage = 900ULL << 20;  // over its limit already: nothing left
  CHECK(tightest_cgroup_limit(levels)->bytes == 0);
  CHECK_FALSE(tightest_cgroup_limit(std::vector<CgroupLevel>{{"/a", std::nullopt, 5, 0}}).has_value());
  CHECK(parse_mem_available("MemTotal:  100 kB\nMemAvailable:    24113492 kB\n") == 24113492ULL * 1024);
  CHECK_FALSE(parse_mem_available("MemTotal: 100 kB\n").has_value());
  CHECK(bytes_text(100) == "100 bytes");
  CHECK(bytes_text(3ULL << 30) == "3.0 GiB");
  // This host states at least MemAvailable.
  CHECK(read_host_memory().available.has_value());
}

TEST_CASE("a segment's memory needs name the option that sizes each part") {
  const std::vector<double> series = make_series(1000);
  SegmentConfig config = make_config(unique_name(), series);
  config.lanes = 4;
  config.bulk_bytes = std::size_t{1} << 30;
  auto needs = segment_memory_needs(config, false);
  REQUIRE(needs.size() == 2);
  CHECK(needs[1].bytes >= 5 * (std::uint64_t{1} << 30));  // a lane more than --lanes: its replacement
  CHECK(contains(needs[1].options, "--bulk-bytes 1073741824"));
  CHECK(contains(needs[1].options, "--lanes 4"));
  config.bulk_bytes = 0;
  config.ring_capacity = 1U << 24;
  needs = segment_memory_needs(config, false);
  CHECK(contains(needs[1].options, "--ring-capacity 16777216"));
  config.ring_capacity = 8;
  config.live = true;
  config.capacity_bars = 200'000'000;
  needs = segment_memory_needs(config, false);
  CHECK(needs[0].bytes >= 200'000'000ULL * sizeof(double));
  CHECK(contains(needs[0].options, "--capacity 200000000"));
  CHECK(segment_memory_needs(config, true).size() == 1);  // huge pages come from their own pool
  // And create refuses them before anything is made, when the host says it cannot back them.
  config.name = unique_name();
  config.capacity_bars = std::size_t{1} << 50;  // 8 PiB of room
  auto created = Segment::create(config);
  REQUIRE_FALSE(created.has_value());
  CHECK(created.error().code == ErrorCode::resource);
  CHECK_MESSAGE(contains(created.error().message, fmt::format("--capacity {}", std::size_t{1} << 50)),
                created.error().message);
  CHECK_FALSE(path_exists(handoff_socket_path(default_socket_dir(), config.name)));
}

TEST_CASE("parses --hugepages and --mlock modes") {
  CHECK(parse_hugepages_mode("auto").value() == HugePagesMode::automatic);
  CHECK(parse_hugepages_mode("require").value() == HugePagesMode::required);
  CHECK(parse_hugepages_mode("off").value() == HugePagesMode::off);
  CHECK(parse_hugepages_mode("on").error().code == ErrorCode::invalid_argument);
  CHECK(parse_mlock_mode("auto").value() == MlockMode::automatic);
  CHECK(parse_mlock_mode("require").value() == MlockMode::required);
  CHECK(parse_mlock_mode("off").value() == MlockMode::off);
  CHECK_FALSE(parse_mlock_mode("").has_value());
  CHECK(to_string(HugePagesMode::required) == "require");
  CHECK(to_string(MlockMode::automatic) == "auto");
  CHECK(backing_name(Backing::memfd_huge_2m) == "memfd_huge_2m");
  CHECK(backing_name(Backing::memfd_4k) == "memfd_4k");
}

TEST_CASE("fnv1a64 matches the published test vectors") {
  const auto hash = [](std::string_view text) { return fnv1a64(std::as_bytes(std::span(text.data(), text.size()))); };
  CHECK(hash("") == 0xcbf29ce484222325ULL);
  CHECK(hash("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(hash("foobar") == 0x85944171f73967e8ULL);
}

TEST_CASE("liveness tells a live process from a dead, zombie or recycled one") {
  const std::uint64_t ticks = process_start_ticks(::getpid());
  CHECK(ticks > 0);
  CHECK(process_alive(::getpid(), ticks));
  CHECK(process_alive(::getpid(), 0));
  CHECK_FALSE(process_alive(::getpid(), ticks + 1));
  CHECK_FALSE(process_alive(0, 0));
  CHECK_FALSE(process_alive(-1, 0));
  CHECK(process_alive(1, 0));  // init: alive, possibly not ours (EPERM counts as alive)
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (process_alive(child, 0) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_FALSE(process_alive(child, 0));  // zombie
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  CHECK_FALSE(process_alive(child, 0));  // gone
  CHECK(process_start_ticks(child) == 0);
  const std::uint64_t a = monotonic_ns();
  const std::uint64_t b = monotonic_ns();
  CHECK(b >= a);
}

TEST_CASE("huge pages: used when the pool has room, otherwise a fallback warning or, when required, the fix") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(300'000);  // 2.4 MB: two huge pages of series
  SegmentConfig config = make_config(name, series);
  const HugePageBudget budget = huge_page_budget();
  if (budget.available >= 8) {
    MESSAGE("host has free 2 MiB huge pages: checking the huge-page path");
    config.hugepages = HugePagesMode::required;
    auto created = Segment::create(config);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->backing() == Backing::memfd_huge_2m);
    CHECK(created->size() % kHugePageBytes == 0);
    CHECK(created->header().series_offset % kHugePageBytes == 0);
    CHECK(created->locked());
    TestKeeper keeper(*created);
    auto attached = Attachment::attach(name, as(HandoffRole::observer));
    REQUIRE_MESSAGE(attached.has_value(), why(attached));
    CHECK(attached->backing() == Backing::memfd_huge_2m);
    CHECK(fnv1a64(std::as_bytes(attached->series())) == created->header().series_checksum);
  } else {
    MESSAGE("host has no free 2 MiB huge pages: checking the fallback and the require error");
    config.hugepages = HugePagesMode::required;
    auto refused = Segment::create(config);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == ErrorCode::resource);
    CHECK(contains(refused.error().message, "/proc/sys/vm/nr_hugepages"));
    CHECK_FALSE(path_exists(handoff_socket_path(default_socket_dir(), name)));
    config.hugepages = HugePagesMode::automatic;
    auto created = Segment::create(config);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->backing() == Backing::memfd_4k);
    bool warned = false;
    for (const std::string& warning : created->warnings())
      warned |= contains(warning, "no huge pages") && contains(warning, "fell back to 4 KiB pages");
    CHECK(warned);
  }
  config.hugepages = HugePagesMode::off;
  config.name = unique_name();
  auto off = Segment::create(config);
  REQUIRE_MESSAGE(off.has_value(), why(off));
  CHECK(off->backing() == Backing::memfd_4k);
  CHECK(off->size() % kSmallPageBytes == 0);
  CHECK(off->warnings().empty());
}

TEST_CASE("mlock: auto warns and runs unlocked, require fails, under a tiny RLIMIT_MEMLOCK") {
  // Root has CAP_IPC_LOCK, which ignores RLIMIT_MEMLOCK: the child drops it from its own
  // effective and permitted sets before lowering the limit.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped: the sanitizer runtimes make mlock() a no-op that always succeeds");
  return;
#endif
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100'000);  // ~1 MB, far above 64 KiB
  const std::string result = in_child([&]() -> std::string {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (::syscall(SYS_capget, &header, data) != 0) return "skip: capget failed";
    data[CAP_IPC_LOCK / 32].effective &= ~(1U << (CAP_IPC_LOCK % 32));
    data[CAP_IPC_LOCK / 32].permitted &= ~(1U << (CAP_IPC_LOCK % 32));
    if (::syscall(SYS_capset, &header, data) != 0) return "skip: capset failed";
    const rlimit tiny{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_MEMLOCK, &tiny) != 0) return "skip: setrlimit failed";

    SegmentConfig config = make_config(name, series);
    config.hugepages = HugePagesMode::off;  // huge pages are never swapped: no mlock there
    config.mlock = MlockMode::required;
    auto refused = Segment::create(config);
    if (refused) return "require: created although mlock cannot succeed";
    if (refused.error().code != ErrorCode::resource) return "require: wrong code: " + refused.error().message;
    for (std::string_view part : {"RLIMIT_MEMLOCK is 64 KiB", "need", "ulimit -l unlimited", "prlimit --memlock"})
      if (!contains(refused.error().message, part))
        return fmt::format("require: '{}' missing in: {}", part, refused.error().message);
    if (path_exists(handoff_socket_path(default_socket_dir(), name))) return "require: the socket was left behind";

    config.mlock = MlockMode::automatic;
    auto created = Segment::create(config);
    if (!created) return "auto: " + created.error().message;
    if (created->locked() || created->header().locked != 0) return "auto: reports locked";
    bool warned = false;
    for (const std::string& w : created->warnings())
      warned |= contains(w, "mlock failed") && contains(w, "RLIMIT_MEMLOCK is 64 KiB") && contains(w, "running unlocked");
    if (!warned) return "auto: no RLIMIT_MEMLOCK warning";

    // Lane objects follow --mlock as the data object does. A data object that fits the limit
    // (12 KiB) leaves too little for the 68 KiB lane objects: under require the engine refuses at
    // start, naming the whole budget, rather than failing the Nth client later.
    const std::vector<double> small = make_series(100);
    SegmentConfig fits = make_config(unique_name(), small);
    fits.hugepages = HugePagesMode::off;
    fits.mlock = MlockMode::required;
    auto budget = Segment::create(fits);
    if (budget) return "lane require: created although the lane objects cannot be locked";
    if (budget.error().code != ErrorCode::resource || !contains(budget.error().message, "lane objects") ||
        !contains(budget.error().message, "RLIMIT_MEMLOCK is 64 KiB"))
      return "lane require: wrong error: " + budget.error().message;
    fits.name = unique_name();
    fits.mlock = MlockMode::automatic;
    auto unlocked = Segment::create(fits);
    if (!unlocked) return "lane auto: " + unlocked.error().message;
    auto lane = unlocked->make_lane_object(0, 1);
    if (!lane) return "lane auto: " + lane.error().message;
    bool lane_warned = false;
    for (const std::string& w : lane->warnings()) lane_warned |= contains(w, "mlock failed") && contains(w, "running unlocked");
    if (!lane_warned) return "lane auto: no warning for the unlocked lane object";
    return "ok";
  });
  if (result.rfind("skip", 0) == 0) {
    MESSAGE(result);
    return;
  }
  CHECK(result == "ok");
}

TEST_CASE("mlock under the host's normal limit locks or says why not") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(1000);
  SegmentConfig config = make_config(name, series);
  config.hugepages = HugePagesMode::off;
  config.mlock = MlockMode::automatic;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  if (!created->locked()) {
    REQUIRE_FALSE(created->warnings().empty());
    CHECK(contains(created->warnings().back(), "RLIMIT_MEMLOCK"));
  }
  CHECK(created->header().locked == (created->locked() ? 1U : 0U));
}

}  // namespace ipcfloor
