// The shared-memory segment (docs/SPEC.md §2, §8): what create publishes and attach accepts, and every
// way a named object can be untrustworthy (live engine, stale engine, garbage, wrong owner or
// mode, wrong version, half built), plus the host-dependent paths (huge pages, mlock limits, a
// full tmpfs). Must pass with and without huge pages configured on the host.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "shm/liveness.hpp"
#include "shm/segment.hpp"

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
  return config;
}

// The error's message for a failed Expected, "" for a success. doctest evaluates a *_MESSAGE
// argument even for passing assertions when it logs them (-s), so it must be safe then too.
template <class T>
std::string why(const Expected<T>& result) {
  return result.has_value() ? std::string() : result.error().message;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// Unlinks a path we planted ourselves, whatever the test did meanwhile.
struct PlantedFile {
  std::string path;
  ~PlantedFile() { ::unlink(path.c_str()); }
};

PlantedFile plant_file(const std::string& name, const std::vector<unsigned char>& bytes, mode_t mode = 0600) {
  PlantedFile file{fmt::format("/dev/shm/{}", name)};
  const int fd = ::open(file.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(::fchmod(fd, mode) == 0);
  if (!bytes.empty()) REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  return file;
}

std::vector<unsigned char> random_bytes(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<unsigned char> bytes(count);
  for (auto& b : bytes) b = static_cast<unsigned char>(random());
  return bytes;
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

// A 2 MiB hugetlbfs mount with free pages: the same test then checks the hugetlbfs path.
bool host_has_huge_pages() {
  std::ifstream mounts("/proc/mounts");
  std::string device, dir, type, rest;
  bool mounted = false;
  while (mounts >> device >> dir >> type && std::getline(mounts, rest)) {
    if (type == "hugetlbfs" && (rest.find("pagesize=") == std::string::npos || rest.find("pagesize=2M") != std::string::npos)) {
      mounted = true;
    }
  }
  std::ifstream free_file("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  std::uint64_t free_pages = 0;
  free_file >> free_pages;
  return mounted && free_pages >= 8;
}

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

}  // namespace

TEST_CASE("create publishes a complete segment that attach reads back") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(10'000);
  SegmentConfig config = make_config(name, series);
  config.lanes = 3;
  config.ring_capacity = 64;
  config.wait_mode = 2;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  Segment& engine = *created;
  for (const std::string& warning : engine.warnings()) MESSAGE("warning: " << warning);

  const SegmentHeader& h = engine.header();
  const std::size_t page = engine.backing() == Backing::hugetlbfs_2m ? kHugePageBytes : kSmallPageBytes;
  const SegmentGeometry g = compute_geometry(3, 64, series.size(), page);
  CHECK(h.magic == kSegmentMagic);
  CHECK(h.state.load() == static_cast<std::uint32_t>(SegmentState::ready));
  CHECK(h.layout_version == kLayoutVersion);
  CHECK(h.header_bytes == kHeaderBytes);
  CHECK(h.segment_bytes == g.segment_bytes);
  CHECK(engine.size() == g.segment_bytes);
  CHECK(h.lanes_offset == g.lanes_offset);
  CHECK(h.lane_stride == g.lane_stride);
  CHECK(h.series_offset == g.series_offset);
  CHECK(h.series_bytes == g.series_bytes);
  CHECK(h.series_offset % 64 == 0);
  CHECK(h.lane_count == 3);
  CHECK(h.ring_capacity == 64);
  CHECK(h.wait_mode == 2);
  CHECK(h.backing == static_cast<std::uint32_t>(engine.backing()));
  CHECK(h.locked == (engine.locked() ? 1U : 0U));
  CHECK(h.engine_pid == ::getpid());
  CHECK(h.engine_uid == ::geteuid());
  CHECK(h.engine_start_ticks == process_start_ticks(::getpid()));
  CHECK(h.engine_start_unix_ns > 0);
  CHECK(h.heartbeat_interval_ns == 10'000'000);
  CHECK(h.heartbeat_ns.load() > 0);
  CHECK(h.n_bars == series.size());
  CHECK(h.fee == 0.0005);
  CHECK(h.series_first == series.front());
  CHECK(h.series_last == series.back());
  CHECK(std::string(h.series_name) == "synthetic test series");
  CHECK(h.series_checksum == fnv1a64(std::as_bytes(std::span<const double>(series))));
  CHECK(std::equal(series.begin(), series.end(), engine.series().begin(), engine.series().end()));

  for (std::uint32_t i = 0; i < 3; ++i) {
    const LaneView lane = engine.lane(i);
    const auto* control = reinterpret_cast<const unsigned char*>(lane.control);
    CHECK(std::all_of(control, control + sizeof(LaneControl), [](unsigned char b) { return b == 0; }));  // free
    CHECK(lane.request_ring->produced.load() == 0);
    CHECK(lane.response_ring->consumed.load() == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(lane.request_slots) % 64 == 0);
  }

  auto attached = Segment::attach(name);
  REQUIRE_MESSAGE(attached.has_value(), why(attached));
  CHECK(attached->path() == engine.path());
  CHECK(attached->backing() == engine.backing());
  CHECK(attached->size() == engine.size());
  CHECK(attached->base() != engine.base());
  CHECK(attached->header().series_checksum == h.series_checksum);
  CHECK(fnv1a64(std::as_bytes(attached->series())) == h.series_checksum);
  CHECK(attached->header().lane_count == 3);
  CHECK_FALSE(attached->owns_object());
  // One object, two mappings: a client's write is the engine's read.
  attached->lane(2).request_slots[5].seq = 0xfeedULL;
  CHECK(engine.lane(2).request_slots[5].seq == 0xfeedULL);

  // The attacher's destruction leaves the object; the creator's removes it.
  const std::string path = engine.path();
  { Segment gone = std::move(*attached); }
  CHECK(path_exists(path));
  { Segment gone = std::move(engine); }
  CHECK_FALSE(path_exists(path));
}

TEST_CASE("the object is a 0600 regular file owned by the engine's uid") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  const mode_t old_mask = ::umask(0);  // a permissive umask must not widen the mode
  auto created = Segment::create(make_config(name, series));
  ::umask(old_mask);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  struct stat info {};
  REQUIRE(::stat(created->path().c_str(), &info) == 0);
  CHECK(S_ISREG(info.st_mode));
  CHECK((info.st_mode & 07777) == 0600);
  CHECK(info.st_uid == ::geteuid());
}

TEST_CASE("refuses a name held by a live engine") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto first = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(first.has_value(), why(first));
  auto second = Segment::create(make_config(name, series));
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == ErrorCode::busy);
  CHECK(contains(second.error().message, fmt::format("pid {}", ::getpid())));
  CHECK(contains(second.error().message, name));
  // Refusing must not have harmed the live one.
  CHECK(Segment::attach(name).has_value());
  // Nor may the explicit remove helper take it.
  auto removed = Segment::remove(name);
  REQUIRE_FALSE(removed.has_value());
  CHECK(removed.error().code == ErrorCode::busy);
  CHECK(path_exists(first->path()));
}

TEST_CASE("removes a stale segment left by a dead engine") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(1000);

  SUBCASE("the engine process exited without cleaning up (still a zombie, then reaped)") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto segment = Segment::create(make_config(name, series));
      ::_exit(segment.has_value() ? 0 : 1);  // no destructor runs: the object stays behind
    }
    // Unreaped, the child is a zombie: kill(pid, 0) still succeeds, yet it serves nobody.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (process_alive(child, 0) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK_FALSE(process_alive(child, 0));

    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::peer_gone);
    CHECK(contains(attached.error().message, fmt::format("pid {}) is gone", child)));

    auto created = Segment::create(make_config(name, series));
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->header().engine_pid == ::getpid());
    const std::string expected = fmt::format("removed stale segment {} left by dead engine pid {}", name, child);
    CHECK(std::any_of(created->warnings().begin(), created->warnings().end(),
                      [&](const std::string& w) { return contains(w, expected); }));
  }

  SUBCASE("the engine's pid was reused by another process (start time differs)") {
    {
      auto old = Segment::create(make_config(name, series));
      REQUIRE_MESSAGE(old.has_value(), why(old));
      old->header().engine_start_ticks += 1;  // same pid, another process: the engine is dead
      old->release_ownership();
    }
    auto created = Segment::create(make_config(name, series));
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->header().engine_start_ticks == process_start_ticks(::getpid()));
    CHECK(created->warnings().size() >= 1);
  }
}

TEST_CASE("concurrent creators: exactly one wins, also when replacing a stale segment") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(20'000);
  const auto race = [&] {
    constexpr int kCreators = 4;
    int pipes[kCreators][2];
    pid_t children[kCreators];
    for (int i = 0; i < kCreators; ++i) {
      REQUIRE(::pipe(pipes[i]) == 0);
      children[i] = ::fork();
      REQUIRE(children[i] >= 0);
      if (children[i] == 0) {
        std::string verdict;
        {
          auto created = Segment::create(make_config(name, series));
          if (created) {
            verdict = "won";
            std::this_thread::sleep_for(std::chrono::milliseconds(300));  // hold it while the others look
          } else {
            verdict = created.error().code == ErrorCode::busy ? "busy" : "error: " + created.error().message;
          }
        }
        (void)!::write(pipes[i][1], verdict.data(), verdict.size());
        ::_exit(0);
      }
      ::close(pipes[i][1]);
    }
    int winners = 0;
    for (int i = 0; i < kCreators; ++i) {
      std::string verdict;
      char buffer[512];
      for (ssize_t got; (got = ::read(pipes[i][0], buffer, sizeof buffer)) > 0;) verdict.append(buffer, static_cast<std::size_t>(got));
      ::close(pipes[i][0]);
      REQUIRE(::waitpid(children[i], nullptr, 0) == children[i]);
      INFO("creator " << i << ": " << verdict);
      CHECK((verdict == "won" || verdict == "busy"));
      winners += verdict == "won" ? 1 : 0;
    }
    CHECK(winners == 1);
  };

  SUBCASE("on a free name") { race(); }
  SUBCASE("over a stale segment") {
    {
      auto old = Segment::create(make_config(name, series));
      REQUIRE_MESSAGE(old.has_value(), why(old));
      old->header().engine_start_ticks += 1;
      old->release_ownership();
    }
    race();
  }
  CHECK_FALSE(path_exists(fmt::format("/dev/shm/{}", name)));
}

TEST_CASE("refuses garbage at the name without crashing and leaves it untouched") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);

  const auto refused_by_both = [&](const std::string& path) {
    auto created = Segment::create(make_config(name, series));
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::bad_data);
    CHECK(contains(created.error().message, path));
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::bad_data);
    CHECK(contains(attached.error().message, name));
    CHECK(path_exists(path));
    return std::pair{created.error().message, attached.error().message};
  };

  SUBCASE("empty") {
    PlantedFile file = plant_file(name, {});
    refused_by_both(file.path);
  }
  SUBCASE("100 random bytes") {
    PlantedFile file = plant_file(name, random_bytes(100, 1));
    const auto [create_msg, attach_msg] = refused_by_both(file.path);
    CHECK(contains(create_msg, "not an ipcfloor segment"));
    CHECK(contains(attach_msg, "not an ipcfloor segment"));
  }
  SUBCASE("1 MiB of random bytes") {
    PlantedFile file = plant_file(name, random_bytes(1 << 20, 2));
    const auto [create_msg, attach_msg] = refused_by_both(file.path);
    CHECK(contains(create_msg, "not an ipcfloor segment"));
    CHECK(contains(attach_msg, "not an ipcfloor segment"));
  }
  SUBCASE("1 MiB of random bytes behind a forged magic, version and ready state") {
    std::vector<unsigned char> bytes = random_bytes(1 << 20, 3);
    std::memcpy(bytes.data(), &kSegmentMagic, sizeof kSegmentMagic);
    const std::uint32_t ready = 1;
    std::memcpy(bytes.data() + 8, &ready, 4);
    std::memcpy(bytes.data() + 12, &kLayoutVersion, 4);
    PlantedFile file = plant_file(name, bytes);
    const auto [create_msg, attach_msg] = refused_by_both(file.path);
    CHECK(contains(create_msg, "corrupt"));
    CHECK(contains(attach_msg, "corrupt"));
  }
  SUBCASE("a FIFO") {
    PlantedFile file{fmt::format("/dev/shm/{}", name)};
    REQUIRE(::mkfifo(file.path.c_str(), 0600) == 0);
    auto created = Segment::create(make_config(name, series));
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::permission);
    CHECK(contains(created.error().message, "not a regular file"));
    CHECK_FALSE(Segment::attach(name).has_value());
  }
}

TEST_CASE("refuses an object with group/other permission bits or another owner") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  const std::string& path = created->path();

  SUBCASE("mode 0644") {
    REQUIRE(::chmod(path.c_str(), 0644) == 0);
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK(contains(attached.error().message, fmt::format("{} ({}) is owned by uid {} (mode 0644); ipcfloor only trusts 0600 "
                                                         "objects owned by uid {}",
                                                         name, path, ::geteuid(), ::geteuid())));
    auto second = Segment::create(make_config(name, series));
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().code == ErrorCode::permission);
    CHECK(contains(second.error().message, "mode 0644"));
    CHECK(path_exists(path));
  }
  SUBCASE("owned by another uid") {
    if (::geteuid() != 0) {
      MESSAGE("skipped: only root can give an object away");
      return;
    }
    REQUIRE(::chown(path.c_str(), 65534, static_cast<gid_t>(-1)) == 0);
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK(contains(attached.error().message, "owned by uid 65534 (mode 0600)"));
    auto second = Segment::create(make_config(name, series));
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().code == ErrorCode::permission);
    CHECK(contains(second.error().message, "left untouched"));
    auto removed = Segment::remove(name);
    REQUIRE_FALSE(removed.has_value());
    CHECK(removed.error().code == ErrorCode::permission);
    CHECK(path_exists(path));
  }
}

TEST_CASE("refuses a segment of another layout version, naming both versions") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  created->header().layout_version = kLayoutVersion + 98;
  auto attached = Segment::attach(name);
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().code == ErrorCode::version_mismatch);
  CHECK(contains(attached.error().message, fmt::format("layout version {}", kLayoutVersion + 98)));
  CHECK(contains(attached.error().message, fmt::format("layout version {}", kLayoutVersion)));
  // A restarting engine cannot judge another layout's liveness either: it refuses, untouched.
  auto second = Segment::create(make_config(name, series));
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == ErrorCode::version_mismatch);
  CHECK(path_exists(created->path()));
  created->header().layout_version = kLayoutVersion;
}

TEST_CASE("attach refuses, without waiting, a segment that is not ready") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));

  SUBCASE("still being built") {
    created->header().state.store(static_cast<std::uint32_t>(SegmentState::building));
    const auto start = std::chrono::steady_clock::now();
    auto attached = Segment::attach(name);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::busy);
    CHECK(contains(attached.error().message, fmt::format("{} is still being built by pid {}; retry", name, ::getpid())));
  }
  SUBCASE("stopping") {
    created->mark_stopping();
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::peer_gone);
    CHECK(contains(attached.error().message, "stopping"));
  }
}

TEST_CASE("attach refuses a segment whose layout or series is corrupt") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(5000);
  auto created = Segment::create(make_config(name, series));
  REQUIRE_MESSAGE(created.has_value(), why(created));
  SegmentHeader& h = created->header();

  SUBCASE("an offset that disagrees with the geometry") {
    h.lane_stride += 4096;
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::bad_data);
    CHECK(contains(attached.error().message, "differ from this build's layout"));
    h.lane_stride -= 4096;
  }
  SUBCASE("more bars than the object holds") {
    h.n_bars = h.segment_bytes;
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::bad_data);
  }
  SUBCASE("too many lanes") {
    h.lane_count = kMaxLanes + 1;
    CHECK_FALSE(Segment::attach(name).has_value());
  }
  SUBCASE("a scribbled series") {
    const_cast<double&>(created->series()[17]) = -1.0;
    auto attached = Segment::attach(name);
    REQUIRE_FALSE(attached.has_value());
    CHECK(attached.error().code == ErrorCode::bad_data);
    CHECK(contains(attached.error().message, "hashes to"));
  }
}

TEST_CASE("attach names the missing segment when no engine runs") {
  const std::string name = unique_name();
  auto attached = Segment::attach(name);
  REQUIRE_FALSE(attached.has_value());
  CHECK(attached.error().code == ErrorCode::peer_gone);
  CHECK(contains(attached.error().message, fmt::format("/dev/shm/{}", name)));
  CHECK(Segment::remove(name).has_value());  // nothing there: nothing to do
}

TEST_CASE("remove deletes a dead engine's segment and our own junk") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(100);
  std::string path;
  {
    auto old = Segment::create(make_config(name, series));
    REQUIRE_MESSAGE(old.has_value(), why(old));
    old->header().engine_start_ticks += 1;
    old->release_ownership();
    path = old->path();
  }
  CHECK(path_exists(path));
  auto removed = Segment::remove(name);
  REQUIRE_MESSAGE(removed.has_value(), why(removed));
  CHECK_FALSE(path_exists(path));

  PlantedFile junk = plant_file(name, random_bytes(100, 4), 0644);
  CHECK(Segment::remove(name).has_value());
  CHECK_FALSE(path_exists(junk.path));
}

TEST_CASE("rejects bad configurations and names") {
  const std::vector<double> series = make_series(10);
  for (const char* bad : {"", ".", "..", "a/b", "has space", "semi;colon"}) {
    SegmentConfig config = make_config(bad, series);
    auto created = Segment::create(config);
    REQUIRE_FALSE(created.has_value());
    CHECK(created.error().code == ErrorCode::invalid_argument);
    CHECK_FALSE(Segment::attach(bad).has_value());
  }
  CHECK_FALSE(valid_segment_name(std::string(201, 'a')));
  CHECK(valid_segment_name(std::string(200, 'a')));
  CHECK(valid_segment_name("ipcfloor.main_2-x"));

  const std::string name = unique_name();
  SegmentConfig config = make_config(name, series);
  config.lanes = 0;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.lanes = kMaxLanes + 1;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.lanes = 1;
  config.ring_capacity = 3;
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  config.ring_capacity = 2;
  config.series = {};
  CHECK(Segment::create(config).error().code == ErrorCode::invalid_argument);
  CHECK_FALSE(path_exists(fmt::format("/dev/shm/{}", name)));
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
  CHECK(backing_name(Backing::hugetlbfs_2m) == "hugetlbfs_2m");
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
  while (process_alive(child, 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK_FALSE(process_alive(child, 0));  // zombie
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  CHECK_FALSE(process_alive(child, 0));  // gone
  CHECK(process_start_ticks(child) == 0);

  const std::uint64_t a = monotonic_ns();
  const std::uint64_t b = monotonic_ns();
  CHECK(b >= a);
}

TEST_CASE("huge pages: used when available, otherwise a fallback warning or, when required, the fix") {
  const std::string name = unique_name();
  const std::vector<double> series = make_series(300'000);  // 2.4 MB: two huge pages of series
  SegmentConfig config = make_config(name, series);
  if (host_has_huge_pages()) {
    MESSAGE("host has 2 MiB huge pages: checking the hugetlbfs path");
    config.hugepages = HugePagesMode::required;
    auto created = Segment::create(config);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->backing() == Backing::hugetlbfs_2m);
    CHECK(created->size() % kHugePageBytes == 0);
    CHECK(created->header().series_offset % kHugePageBytes == 0);
    CHECK(created->locked());
    CHECK_FALSE(contains(created->path(), "/dev/shm/"));
    auto attached = Segment::attach(name);
    REQUIRE_MESSAGE(attached.has_value(), why(attached));
    CHECK(attached->backing() == Backing::hugetlbfs_2m);
    CHECK(attached->path() == created->path());
    CHECK(fnv1a64(std::as_bytes(attached->series())) == created->header().series_checksum);
    // A live engine on hugetlbfs also holds the name against a tmpfs-only creator.
    config.hugepages = HugePagesMode::off;
    auto second = Segment::create(config);
    REQUIRE_FALSE(second.has_value());
    CHECK(second.error().code == ErrorCode::busy);
    created->header().engine_start_ticks += 1;  // "dead": a tmpfs creator clears it from hugetlbfs
    auto replaced = Segment::create(config);
    REQUIRE_MESSAGE(replaced.has_value(), why(replaced));
    CHECK(replaced->backing() == Backing::tmpfs_4k);
    CHECK_FALSE(path_exists(created->path()));
  } else {
    MESSAGE("host has no 2 MiB huge pages: checking the fallback and the require error");
    config.hugepages = HugePagesMode::required;
    auto refused = Segment::create(config);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == ErrorCode::resource);
    CHECK(contains(refused.error().message, "/proc/sys/vm/nr_hugepages"));
    CHECK_FALSE(path_exists(fmt::format("/dev/shm/{}", name)));
    config.hugepages = HugePagesMode::automatic;
    auto created = Segment::create(config);
    REQUIRE_MESSAGE(created.has_value(), why(created));
    CHECK(created->backing() == Backing::tmpfs_4k);
    CHECK(created->size() % kSmallPageBytes == 0);
    REQUIRE(created->warnings().size() >= 1);
    CHECK(contains(created->warnings().front(), "no huge pages"));
    CHECK(contains(created->warnings().front(), "fell back to 4 KiB pages"));
    CHECK(contains(created->warnings().front(), "nr_hugepages"));
  }
  config.hugepages = HugePagesMode::off;
  const std::string off_name = unique_name();
  config.name = off_name;
  auto off = Segment::create(config);
  REQUIRE_MESSAGE(off.has_value(), why(off));
  CHECK(off->backing() == Backing::tmpfs_4k);
  CHECK(off->path() == fmt::format("/dev/shm/{}", off_name));
  CHECK(off->warnings().empty());
}

TEST_CASE("mlock: auto warns and runs unlocked, require fails, under a tiny RLIMIT_MEMLOCK") {
  // Root has CAP_IPC_LOCK, which ignores RLIMIT_MEMLOCK: the child drops it from its own
  // effective and permitted sets before lowering the limit.
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("skipped: AddressSanitizer replaces mlock() with a no-op that always succeeds");
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
    config.hugepages = HugePagesMode::off;  // hugetlbfs pages are never swapped: no mlock there
    config.mlock = MlockMode::required;
    auto refused = Segment::create(config);
    if (refused) return "require: created although mlock cannot succeed";
    if (refused.error().code != ErrorCode::resource) return "require: wrong code: " + refused.error().message;
    for (std::string_view part : {"RLIMIT_MEMLOCK is 64 KiB", "the segment needs", "ulimit -l unlimited", "prlimit --memlock"}) {
      if (!contains(refused.error().message, part)) return fmt::format("require: '{}' missing in: {}", part, refused.error().message);
    }
    if (path_exists(fmt::format("/dev/shm/{}", name))) return "require: the object was left behind";

    config.mlock = MlockMode::automatic;
    auto created = Segment::create(config);
    if (!created) return "auto: " + created.error().message;
    if (created->locked() || created->header().locked != 0) return "auto: reports locked";
    bool warned = false;
    for (const std::string& w : created->warnings()) {
      warned |= contains(w, "mlock failed") && contains(w, "RLIMIT_MEMLOCK is 64 KiB") && contains(w, "running unlocked");
    }
    if (!warned) return "auto: no RLIMIT_MEMLOCK warning";

    config.name += "-off";
    config.mlock = MlockMode::off;
    auto unlocked = Segment::create(config);
    if (!unlocked) return "off: " + unlocked.error().message;
    if (unlocked->locked() || !unlocked->warnings().empty()) return "off: locked or warned";
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
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  if (!created->locked()) {
    REQUIRE_FALSE(created->warnings().empty());
    CHECK(contains(created->warnings().back(), "RLIMIT_MEMLOCK"));
  }
  CHECK(created->header().locked == (created->locked() ? 1U : 0U));
}

TEST_CASE("a too-small tmpfs is a clear error at creation, never a SIGBUS later") {
  const std::string dir = fmt::format("/tmp/ipcfloor-tiny-{}", ::getpid());
  std::filesystem::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1M,mode=0700") != 0) {
    MESSAGE("skipped: cannot mount a tiny tmpfs at " << dir << " (" << std::strerror(errno) << "); needs root");
    std::filesystem::remove(dir);
    return;
  }
  struct Unmount {
    std::string dir;
    ~Unmount() {
      ::umount2(dir.c_str(), MNT_DETACH);
      std::filesystem::remove(dir);
    }
  } unmount{dir};

  const std::string name = unique_name();
  const std::vector<double> big = make_series(1'000'000);  // 8 MB into a 1 MiB tmpfs
  SegmentConfig config = make_config(name, big);
  config.hugepages = HugePagesMode::off;
  config.tmpfs_dir = dir;
  auto refused = Segment::create(config);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource);
  CHECK(contains(refused.error().message, dir));
  CHECK(contains(refused.error().message, "too small"));
  CHECK(contains(refused.error().message, "bytes"));
  CHECK_FALSE(path_exists(fmt::format("{}/{}", dir, name)));

  const std::vector<double> small = make_series(1000);
  config.series = small;
  config.lanes = 1;
  config.ring_capacity = 16;
  config.bulk_bytes = 64 * 1024;
  auto created = Segment::create(config);
  REQUIRE_MESSAGE(created.has_value(), why(created));
  CHECK(created->path() == fmt::format("{}/{}", dir, name));
  CHECK(created->bulk(0).size() == 64 * 1024);
  auto attached = Segment::attach(name, dir);
  REQUIRE_MESSAGE(attached.has_value(), why(attached));
  CHECK(fnv1a64(std::as_bytes(attached->series())) == created->header().series_checksum);
}

}  // namespace ipcfloor
