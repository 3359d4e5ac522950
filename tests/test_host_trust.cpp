// What another user of the host can plant or take away, end to end with the real binary
// (docs/RELIABILITY.md): links at the names the engine and the CLI write, directories other users
// may write, a second engine given the same pid file, a cpuset or an empty /sys that doctor and
// serve must judge alike.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "common/affinity.hpp"
#include "tests/fault_harness.hpp"

namespace ipcfloor {
namespace {

using fault::eventually;
using fault::Spawned;
using fault::TestCgroup;

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// A fresh directory under /tmp with `mode`, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(mode_t mode) {
    char pattern[] = "/tmp/ipcfloor-host-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path_ = pattern;
    REQUIRE(::chmod(path_.c_str(), mode) == 0);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<std::string> serve_args(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> args{IPCFLOOR_BINARY, "serve", "--name", name, "--bars", "1000", "--wait", "backoff",
                                "--hugepages", "off", "--mlock", "off", "--workers", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The pid a pid file holds, or 0.
pid_t pid_in(const std::string& path) { return static_cast<pid_t>(std::atoi(read_file(path).c_str())); }

// Whether `path` is a regular file (not a link) holding `pid`.
bool holds_pid(const std::string& path, pid_t pid) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && pid_in(path) == pid;
}

std::string exit_text(const std::optional<int>& status) {
  if (!status) return "still running";
  if (WIFEXITED(*status)) return fmt::format("exit {}", WEXITSTATUS(*status));
  return fmt::format("signal {}", WTERMSIG(*status));
}

}  // namespace

TEST_CASE("the pid file is never written through a link another user planted at a name the engine will use") {
  const TempDir dir(01777);  // sticky and world-writable, as /tmp
  const std::string victim = dir / "root-only";
  write_text(victim, "secret\n");
  REQUIRE(::chmod(victim.c_str(), 0600) == 0);
  const std::string pidfile = dir / "engine.pid";
  // The names the engine used to write first, PATH.<pid>.tmp, are predictable: the hook plants
  // links there for the engine's own pid before it execs, and one at PATH itself.
  Spawned engine(serve_args(unique_segment_name("pidlink"), {"--pidfile", pidfile}), [&] {
    const std::string planted = fmt::format("{}.{}.tmp", pidfile, ::getpid());
    if (::symlink(victim.c_str(), planted.c_str()) != 0 || ::symlink(victim.c_str(), pidfile.c_str()) != 0)
      ::_exit(Spawned::kHookFailed);
  });
  REQUIRE_MESSAGE(eventually([&] { return holds_pid(pidfile, engine.pid()); }, std::chrono::seconds(20)),
                  engine.stderr_text());
  CHECK(read_file(victim) == "secret\n");
  struct stat info {};
  REQUIRE(::stat(victim.c_str(), &info) == 0);
  CHECK((info.st_mode & 07777) == 0600);
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
  CHECK(read_file(victim) == "secret\n");
}

TEST_CASE("a pid file directory other users may write without the sticky bit is refused, naming it") {
  const TempDir dir(0777);  // world-writable, not sticky: anyone may rename or replace files in it
  const std::string pidfile = dir / "engine.pid";
  Spawned engine(serve_args(unique_segment_name("piddir"), {"--pidfile", pidfile}));
  const auto status = engine.wait_exit(std::chrono::seconds(20));
  REQUIRE_MESSAGE(status.has_value(), "serve kept running with its pid file in a 0777 directory");
  CHECK_MESSAGE(WIFEXITED(*status), exit_text(status));
  CHECK(WEXITSTATUS(*status) == 4);
  const std::string error = engine.stderr_text();
  CHECK_MESSAGE(contains(error, dir.path()), error);
  CHECK_MESSAGE(contains(error, "sticky"), error);
  CHECK_FALSE(std::filesystem::exists(pidfile));
}

TEST_CASE("gen -o refuses a directory other users may write without the sticky bit, and writes through no link") {
  const TempDir open_dir(0777);
  Spawned refused({IPCFLOOR_BINARY, "gen", "--bars", "100", "-o", open_dir / "series.csv"});
  const auto status = refused.wait_exit(std::chrono::seconds(20));
  REQUIRE(status.has_value());
  CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) != 0), exit_text(status));
  CHECK_MESSAGE(contains(refused.stderr_text(), "sticky"), refused.stderr_text());
  CHECK_FALSE(std::filesystem::exists(open_dir / "series.csv"));

  const TempDir sticky(01777);
  const std::string victim = sticky / "victim";
  write_text(victim, "keep\n");
  REQUIRE(::symlink(victim.c_str(), (sticky / "series.csv").c_str()) == 0);
  Spawned written({IPCFLOOR_BINARY, "gen", "--bars", "100", "-o", sticky / "series.csv"});
  const auto done = written.wait_exit(std::chrono::seconds(20));
  REQUIRE(done.has_value());
  CHECK_MESSAGE((WIFEXITED(*done) && WEXITSTATUS(*done) == 0), written.stderr_text());
  CHECK(read_file(victim) == "keep\n");
  CHECK_FALSE(std::filesystem::is_symlink(sticky / "series.csv"));
}

TEST_CASE("two engines given one pid file: the first to stop leaves the file of the one still running") {
  const TempDir dir(0700);
  const std::string pidfile = dir / "engine.pid";
  Spawned first(serve_args(unique_segment_name("pidfirst"), {"--pidfile", pidfile}));
  REQUIRE_MESSAGE(eventually([&] { return holds_pid(pidfile, first.pid()); }, std::chrono::seconds(20)),
                  first.stderr_text());
  Spawned second(serve_args(unique_segment_name("pidsecond"), {"--pidfile", pidfile}));
  REQUIRE_MESSAGE(eventually([&] { return holds_pid(pidfile, second.pid()); }, std::chrono::seconds(20)),
                  second.stderr_text());
  CHECK(WIFEXITED(first.stop(SIGTERM)));
  CHECK_MESSAGE(holds_pid(pidfile, second.pid()), "the first engine removed the second's pid file");
  CHECK(WIFEXITED(second.stop(SIGTERM)));
  CHECK_FALSE(std::filesystem::exists(pidfile));  // its own file, it removes
}

TEST_CASE("a pid file in a missing folder: the error names the path given, not a temporary one") {
  const TempDir dir(0700);
  const std::string pidfile = dir / "missing/engine.pid";
  Spawned engine(serve_args(unique_segment_name("pidmissing"), {"--pidfile", pidfile}));
  const auto status = engine.wait_exit(std::chrono::seconds(20));
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) != 0);
  const std::string error = engine.stderr_text();
  CHECK_MESSAGE(contains(error, pidfile), error);
  CHECK_MESSAGE(contains(error, "does not exist"), error);
  CHECK_MESSAGE(!contains(error, ".tmp"), error);
}

TEST_CASE("in a cpuset without the cpu asked for, doctor and serve refuse it with the same reason: the cpuset") {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.size() < 2) {
    MESSAGE("skipped: needs two cpus this process may use");
    return;
  }
  const int kept = allowed.front();
  const int excluded = allowed.back();
  const auto cgroup = TestCgroup::cpuset(std::to_string(kept));
  if (!cgroup) {
    MESSAGE("skipped: no cpuset cgroup could be made here (needs root and a writable cpuset hierarchy)");
    return;
  }
  const std::string cpu = std::to_string(excluded);
  Spawned doctor({IPCFLOOR_BINARY, "doctor", "--cpu", cpu, "--json"}, [&] { cgroup->enter(); });
  Spawned serve(serve_args(unique_segment_name("cpuset"), {"--cpu", cpu}), [&] { cgroup->enter(); });
  const auto doctor_status = doctor.wait_exit(std::chrono::seconds(30));
  const auto serve_status = serve.wait_exit(std::chrono::seconds(30));
  REQUIRE(doctor_status.has_value());
  REQUIRE_MESSAGE(serve_status.has_value(), "serve ran on an excluded cpu");
  CHECK_MESSAGE((WIFEXITED(*doctor_status) && WEXITSTATUS(*doctor_status) == 4), exit_text(doctor_status));
  CHECK_MESSAGE((WIFEXITED(*serve_status) && WEXITSTATUS(*serve_status) != 0), exit_text(serve_status));
  const std::string reason = "not in this process's allowed cpus (cpuset";
  CHECK_MESSAGE(contains(serve.stderr_text(), reason), serve.stderr_text());
  CHECK_MESSAGE(!contains(serve.stderr_text(), "is not online"), serve.stderr_text());
  // doctor's stdout went to /dev/null: ask again with it captured.
  Spawned again({"/bin/sh", "-c", fmt::format("exec {} doctor --cpu {} --json 1>&2", IPCFLOOR_BINARY, cpu)},
                [&] { cgroup->enter(); });
  REQUIRE(again.wait_exit(std::chrono::seconds(30)).has_value());
  const auto report = nlohmann::json::parse(again.stderr_text(), nullptr, false);
  REQUIRE_MESSAGE(!report.is_discarded(), again.stderr_text());
  bool cpu_failed = false;
  for (const auto& check : report["checks"])
    if (check["check"] == "cpu") {
      cpu_failed = check["level"] == "fail";
      CHECK_MESSAGE(contains(check["finding"].get<std::string>(), reason), check.dump());
    }
  CHECK(cpu_failed);
}

TEST_CASE("with an empty /sys, doctor judges the serving cpu as serve does: usable") {
  // A mount namespace of its own with a tmpfs over /sys, made in the child before exec.
  const auto empty_sys = [] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/sys", "tmpfs", 0, "size=64k") != 0)
      ::_exit(Spawned::kHookFailed);
  };
  Spawned doctor({"/bin/sh", "-c", fmt::format("exec {} doctor --cpu 0 --json 1>&2", IPCFLOOR_BINARY)}, empty_sys);
  const auto status = doctor.wait_exit(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == Spawned::kHookFailed) {
    MESSAGE("skipped: no mount namespace could be made here (needs root)");
    return;
  }
  const auto report = nlohmann::json::parse(doctor.stderr_text(), nullptr, false);
  REQUIRE_MESSAGE(!report.is_discarded(), doctor.stderr_text());
  bool seen = false;
  for (const auto& check : report["checks"])
    if (check["check"] == "cpu") {
      seen = true;
      CHECK_MESSAGE(check["level"] != "fail", check.dump());
    }
  CHECK(seen);
  // serve decides with the same code: it starts on cpu 0 under the same empty /sys.
  Spawned serve(serve_args(unique_segment_name("emptysys"), {"--cpu", "0"}), empty_sys);
  CHECK_MESSAGE(!serve.wait_exit(std::chrono::seconds(3)).has_value(), serve.stderr_text());
  CHECK(WIFEXITED(serve.stop(SIGTERM)));
}

}  // namespace ipcfloor
