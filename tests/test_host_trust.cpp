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
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "common/affinity.hpp"
#include "ipcfloor/ipcfloor.h"
#include "shm/segment.hpp"
#include "shm/socket_dir.hpp"
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

// Waits (bounded) until an observer finds engine `name` in `dir`.
bool serving(const std::string& name, const std::string& dir) {
  return eventually(
      [&] {
        AttachOptions options;
        options.socket_dir = dir;
        options.role = HandoffRole::observer;
        options.timeout = std::chrono::milliseconds(200);
        return Attachment::attach(name, options).has_value();
      },
      std::chrono::seconds(20));
}

// The checks `ipcfloor doctor ARGS --json` prints, run with `hook` before exec.
nlohmann::json doctor_checks(const std::vector<std::string>& args, const std::function<void()>& hook = {}) {
  std::string command = fmt::format("exec {} doctor --json", IPCFLOOR_BINARY);
  for (const std::string& arg : args) command += " '" + arg + "'";
  Spawned doctor({"/bin/sh", "-c", command + " 1>&2"}, hook);
  if (!doctor.wait_exit(std::chrono::seconds(30))) return {};
  const auto report = nlohmann::json::parse(doctor.stderr_text(), nullptr, false);
  return report.is_discarded() ? nlohmann::json{} : report["checks"];
}

// The check named `name` among `checks` (null when absent).
nlohmann::json check_named(const nlohmann::json& checks, const std::string& name) {
  for (const auto& check : checks)
    if (check["check"] == name) return check;
  return {};
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

TEST_CASE("topology --save refuses a folder another user owns or may write without the sticky bit, and writes "
          "through no link planted at a name it would use") {
  // Before: the matrix was written into both folders, through PATH.<pid>.tmp, a name anyone could
  // plant a link at first (then the save failed: "cannot create").
  const auto save = [](const std::string& target, const std::function<void()>& plant = {}) {
    auto spawned = std::make_unique<Spawned>(std::vector<std::string>{IPCFLOOR_BINARY, "topology", "--save", "--json"},
                                             [&] {
                                               ::setenv("IPCFLOOR_TOPOLOGY", target.c_str(), 1);
                                               if (plant) plant();
                                             });
    const auto status = spawned->wait_exit(std::chrono::seconds(60));
    return std::make_pair(status, spawned->stderr_text());
  };
  const TempDir open_dir(0777);
  const auto [open_status, open_error] = save(open_dir / "topology.json");
  CHECK_MESSAGE((open_status && WIFEXITED(*open_status) && WEXITSTATUS(*open_status) == 4), exit_text(open_status));
  CHECK_MESSAGE(contains(open_error, open_dir.path()), open_error);
  CHECK_MESSAGE(contains(open_error, "sticky"), open_error);
  CHECK_FALSE(std::filesystem::exists(open_dir / "topology.json"));

  const TempDir theirs(0755);
  REQUIRE(::chown(theirs.path().c_str(), 65534, 65534) == 0);
  const auto [their_status, their_error] = save(theirs / "topology.json");
  CHECK_MESSAGE((their_status && WIFEXITED(*their_status) && WEXITSTATUS(*their_status) == 4), exit_text(their_status));
  CHECK_MESSAGE(contains(their_error, "65534"), their_error);
  CHECK_FALSE(std::filesystem::exists(theirs / "topology.json"));

  const TempDir sticky(01777);
  const std::string victim = sticky / "victim";
  write_text(victim, "keep\n");
  const std::string target = sticky / "topology.json";
  const auto [sticky_status, sticky_error] = save(target, [&] {
    if (::symlink(victim.c_str(), fmt::format("{}.{}.tmp", target, ::getpid()).c_str()) != 0) ::_exit(Spawned::kHookFailed);
  });
  CHECK_MESSAGE((sticky_status && WIFEXITED(*sticky_status) && WEXITSTATUS(*sticky_status) == 0), sticky_error);
  CHECK(read_file(victim) == "keep\n");
  CHECK(contains(read_file(target), "\"suite\": \"topology\""));
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
  const nlohmann::json check = check_named(doctor_checks({"--cpu", cpu}, [&] { cgroup->enter(); }), "cpu");
  REQUIRE_MESSAGE(!check.is_null(), "doctor printed no cpu check");
  CHECK(check["level"] == "fail");
  CHECK_MESSAGE(contains(check["finding"].get<std::string>(), reason), check.dump());
}

TEST_CASE("with an empty /sys, doctor judges the serving cpu as serve does: usable") {
  // A mount namespace of its own with a tmpfs over /sys, made in the child before exec.
  const auto empty_sys = [] {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/sys", "tmpfs", 0, "size=64k") != 0)
      ::_exit(Spawned::kHookFailed);
  };
  Spawned probe({"/bin/true"}, empty_sys);
  const auto status = probe.wait_exit(std::chrono::seconds(30));
  REQUIRE(status.has_value());
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == Spawned::kHookFailed) {
    MESSAGE("skipped: no mount namespace could be made here (needs root)");
    return;
  }
  const nlohmann::json check = check_named(doctor_checks({"--cpu", "0"}, empty_sys), "cpu");
  REQUIRE_MESSAGE(!check.is_null(), "doctor printed no cpu check");
  CHECK_MESSAGE(check["level"] != "fail", check.dump());
  // serve decides with the same code: it starts on cpu 0 under the same empty /sys.
  Spawned serve(serve_args(unique_segment_name("emptysys"), {"--cpu", "0"}), empty_sys);
  CHECK_MESSAGE(!serve.wait_exit(std::chrono::seconds(3)).has_value(), serve.stderr_text());
  CHECK(WIFEXITED(serve.stop(SIGTERM)));
}

}  // namespace ipcfloor

namespace ipcfloor {

TEST_CASE("two engines' sockets swapped in a shared directory: an attach refuses the engine it did not ask for") {
  const TempDir dir(01777);  // sticky and world-writable: any user may add files, only we may move ours
  const std::string alpha = unique_segment_name("alpha");
  const std::string beta = unique_segment_name("beta");
  Spawned first(serve_args(alpha, {"--socket-dir", dir.path()}));
  Spawned second(serve_args(beta, {"--socket-dir", dir.path()}));
  REQUIRE_MESSAGE(serving(alpha, dir.path()), first.stderr_text());
  REQUIRE_MESSAGE(serving(beta, dir.path()), second.stderr_text());
  // What another user did in the report, in a directory without the sticky bit; here the owner does it.
  const std::string moved = dir / "moved";
  REQUIRE(::rename((dir / alpha).c_str(), moved.c_str()) == 0);
  REQUIRE(::rename((dir / beta).c_str(), (dir / alpha).c_str()) == 0);
  REQUIRE(::rename(moved.c_str(), (dir / beta).c_str()) == 0);
  for (const HandoffRole role : {HandoffRole::observer, HandoffRole::lane}) {
    AttachOptions options;
    options.socket_dir = dir.path();
    options.role = role;
    auto attached = Attachment::attach(alpha, options);
    REQUIRE_FALSE_MESSAGE(attached.has_value(), "attach(alpha) returned beta's engine");
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK_MESSAGE(contains(attached.error().message, fmt::format("serves '{}', not '{}'", beta, alpha)),
                  attached.error().message);
  }
  Spawned status({"/bin/sh", "-c", fmt::format("exec {} status --name {} --socket-dir {} 1>&2", IPCFLOOR_BINARY,
                                                alpha, dir.path())});
  const auto code = status.wait_exit(std::chrono::seconds(20));
  REQUIRE(code.has_value());
  CHECK_MESSAGE((WIFEXITED(*code) && WEXITSTATUS(*code) == 4), exit_text(code));
  CHECK_MESSAGE(contains(status.stderr_text(), "moved or swapped"), status.stderr_text());
  CHECK(WIFEXITED(first.stop(SIGTERM)));
  CHECK(WIFEXITED(second.stop(SIGTERM)));
}

TEST_CASE("serve and doctor refuse a socket directory another user owns, or may write without the sticky bit") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can give a directory away");
    return;
  }
  constexpr uid_t kNobody = 65534;
  const TempDir open_dir(0777);   // root's, but anyone may rename or replace what is in it
  const TempDir theirs(0755);     // another user's
  REQUIRE(::chown(theirs.path().c_str(), kNobody, static_cast<gid_t>(-1)) == 0);
  for (const std::string& dir : {open_dir.path(), theirs.path()}) {
    CAPTURE(dir);
    const std::string name = unique_segment_name("unsafe");
    Spawned serve(serve_args(name, {"--socket-dir", dir}));
    const auto status = serve.wait_exit(std::chrono::seconds(20));
    REQUIRE_MESSAGE(status.has_value(), "serve kept running in an unsafe socket directory");
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), exit_text(status));
    CHECK_MESSAGE(contains(serve.stderr_text(), dir), serve.stderr_text());
    CHECK_FALSE(std::filesystem::exists(dir + "/" + name));
    const nlohmann::json check = check_named(doctor_checks({"--socket-dir", dir, "--name", name}), "socket_dir");
    REQUIRE_MESSAGE(!check.is_null(), "doctor printed no socket_dir check");
    CHECK_MESSAGE(check["level"] == "fail", check.dump());
    CHECK_MESSAGE(contains(check["finding"].get<std::string>(), dir == open_dir.path() ? "sticky" : "belongs to uid"),
                  check.dump());
  }
}

TEST_CASE("swapped socket directories under a folder another user owns: serve refuses the folder, and an attach "
          "there is refused before it reaches the other engine") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can give a directory away");
    return;
  }
  constexpr uid_t kNobody = 65534;
  const TempDir parent(0755);
  const std::string a = parent / "a", b = parent / "b";
  REQUIRE(::mkdir(a.c_str(), 0700) == 0);
  REQUIRE(::mkdir(b.c_str(), 0700) == 0);
  // One name in both directories: two engines that a client tells apart only by the directory.
  const std::string name = unique_segment_name("twins");
  Spawned first(serve_args(name, {"--socket-dir", a, "--seed", "1"}));
  Spawned second(serve_args(name, {"--socket-dir", b, "--seed", "2"}));
  REQUIRE_MESSAGE(serving(name, a), first.stderr_text());
  REQUIRE_MESSAGE(serving(name, b), second.stderr_text());
  // The folder above them is given to another user, who swaps the two directories.
  REQUIRE(::chown(parent.path().c_str(), kNobody, static_cast<gid_t>(-1)) == 0);
  const std::string moved = parent / "moved";
  REQUIRE(::rename(a.c_str(), moved.c_str()) == 0);
  REQUIRE(::rename(b.c_str(), a.c_str()) == 0);
  REQUIRE(::rename(moved.c_str(), b.c_str()) == 0);
  for (const HandoffRole role : {HandoffRole::observer, HandoffRole::lane}) {
    AttachOptions options;
    options.socket_dir = a;
    options.role = role;
    auto attached = Attachment::attach(name, options);
    // Before: the attach returned the engine that started in b, with no error.
    REQUIRE_FALSE_MESSAGE(attached.has_value(), "attach returned the engine of the swapped directory");
    CHECK(attached.error().code == ErrorCode::permission);
    CHECK_MESSAGE(contains(attached.error().message, fmt::format("inside {}, which belongs to uid {}", parent.path(), kNobody)),
                  attached.error().message);
  }
  // And serve refuses such a directory from the start.
  Spawned third(serve_args(unique_segment_name("under"), {"--socket-dir", a}));
  const auto status = third.wait_exit(std::chrono::seconds(20));
  REQUIRE_MESSAGE(status.has_value(), "serve kept running under another user's folder");
  CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), exit_text(status));
  CHECK_MESSAGE(contains(third.stderr_text(), "belongs to uid 65534"), third.stderr_text());
  REQUIRE(::chown(parent.path().c_str(), 0, static_cast<gid_t>(-1)) == 0);
  first.stop(SIGTERM);
  second.stop(SIGTERM);
}

TEST_CASE("/dev/shm/ipcfloor-UID made first by another user: serve and its clients fall back to $HOME/.ipcfloor") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can act as two users");
    return;
  }
  // The user under test is uid 65533, the squatter uid 65534 (before: serve exited 4).
  constexpr uid_t kUser = 65533, kSquatter = 65534;
  const std::string squatted = fmt::format("/dev/shm/ipcfloor-{}", kUser);
  std::error_code ignored;
  std::filesystem::remove_all(squatted, ignored);
  REQUIRE(::mkdir(squatted.c_str(), 0777) == 0);
  REQUIRE(::chown(squatted.c_str(), kSquatter, kSquatter) == 0);
  const TempDir home(0700);
  REQUIRE(::chown(home.path().c_str(), kUser, kUser) == 0);
  const auto as_user = [&] {
    if (::unsetenv(kSocketDirVariable) != 0 || ::unsetenv("XDG_RUNTIME_DIR") != 0 ||
        ::setenv("HOME", home.path().c_str(), 1) != 0 || ::setgid(kUser) != 0 || ::setuid(kUser) != 0)
      ::_exit(Spawned::kHookFailed);
  };
  const std::string name = unique_segment_name("squatted");
  Spawned engine({IPCFLOOR_BINARY, "serve", "--name", name, "--bars", "1000", "--wait", "backoff", "--hugepages", "off",
                  "--mlock", "off", "--workers", "0"},
                 as_user);
  const std::string fallback = home / ".ipcfloor";
  const bool up = eventually([&] { return std::filesystem::exists(fallback + "/" + name); }, std::chrono::seconds(20));
  CHECK_MESSAGE(up, engine.stderr_text());
  Spawned status({"/bin/sh", "-c", fmt::format("exec {} status --name {} 1>&2", IPCFLOOR_BINARY, name)}, as_user);
  const auto code = status.wait_exit(std::chrono::seconds(20));
  REQUIRE(code.has_value());
  CHECK_MESSAGE((WIFEXITED(*code) && WEXITSTATUS(*code) == 0), status.stderr_text());
  CHECK_MESSAGE(contains(status.stderr_text(), name), status.stderr_text());
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
  std::filesystem::remove_all(squatted, ignored);
}

TEST_CASE("a name squatted by another user's socket: doctor names the squatter where it said ok") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: only root can act as another user");
    return;
  }
  constexpr uid_t kNobody = 65534;
  const TempDir dir(01777);
  const std::string name = unique_segment_name("squat");
  const std::string path = dir / name;
  fault::ForkedChild squatter([&](int out) {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) return 1;
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return 2;
    fault::tell(out, "bound");
    ::pause();
    return 0;
  });
  REQUIRE(squatter.read_line() == std::optional<std::string>("bound"));
  const nlohmann::json check = check_named(doctor_checks({"--socket-dir", dir.path(), "--name", name}), "socket_dir");
  REQUIRE_MESSAGE(!check.is_null(), "doctor printed no socket_dir check");
  CHECK_MESSAGE(check["level"] == "fail", check.dump());
  CHECK_MESSAGE(contains(check["finding"].get<std::string>(), fmt::format("a socket of uid {}", kNobody)), check.dump());
  // serve exits 4 with the same words.
  Spawned serve(serve_args(name, {"--socket-dir", dir.path()}));
  const auto status = serve.wait_exit(std::chrono::seconds(20));
  REQUIRE(status.has_value());
  CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), exit_text(status));
  CHECK_MESSAGE(contains(serve.stderr_text(), fmt::format("a socket of uid {}", kNobody)), serve.stderr_text());
}

TEST_CASE("the default socket directory is private to the user: $XDG_RUNTIME_DIR/ipcfloor, made 0700 by serve") {
  const TempDir runtime(0700);
  const std::string name = unique_segment_name("private");
  const auto in_runtime = [&] {
    if (::unsetenv(kSocketDirVariable) != 0 || ::setenv("XDG_RUNTIME_DIR", runtime.path().c_str(), 1) != 0)
      ::_exit(Spawned::kHookFailed);
  };
  Spawned engine(serve_args(name, {}), in_runtime);
  const std::string dir = runtime / "ipcfloor";
  REQUIRE_MESSAGE(serving(name, dir), engine.stderr_text());
  struct stat info {};
  REQUIRE(::lstat(dir.c_str(), &info) == 0);
  CHECK(S_ISDIR(info.st_mode));
  CHECK((info.st_mode & 07777) == 0700);
  CHECK(info.st_uid == ::geteuid());
  // The C ABI's rule is the same one.
  char held[4096];
  const char* const saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string before = saved != nullptr ? saved : "";
  const char* const forced = std::getenv(kSocketDirVariable);
  const std::string forced_before = forced != nullptr ? forced : "";
  REQUIRE(::unsetenv(kSocketDirVariable) == 0);
  REQUIRE(::setenv("XDG_RUNTIME_DIR", runtime.path().c_str(), 1) == 0);
  const std::size_t length = ipcfloor_default_socket_dir(held, sizeof held);
  CHECK(std::string(held, length) == dir);
  REQUIRE(::unsetenv("XDG_RUNTIME_DIR") == 0);
  CHECK(default_socket_dir() == fmt::format("/dev/shm/ipcfloor-{}", ::geteuid()));
  if (!before.empty()) ::setenv("XDG_RUNTIME_DIR", before.c_str(), 1);
  if (!forced_before.empty()) ::setenv(kSocketDirVariable, forced_before.c_str(), 1);
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
  CHECK_FALSE(std::filesystem::exists(dir + "/" + name));
}

}  // namespace ipcfloor

namespace ipcfloor {

TEST_CASE("after a client forks and exits, status does not show its dead pid as the lane's owner") {
  const TempDir dir(0700);
  const std::string name = unique_segment_name("forked");
  Spawned engine(serve_args(name, {"--socket-dir", dir.path(), "--lanes", "1"}));
  REQUIRE_MESSAGE(serving(name, dir.path()), engine.stderr_text());
  // The client takes the lane, forks, and exits; its child keeps the connection (the lease).
  int to_parent[2];
  REQUIRE(::pipe(to_parent) == 0);
  fault::ForkedChild client([&](int out) {
    AttachOptions options;
    options.socket_dir = dir.path();
    options.role = HandoffRole::lane;
    auto lane = Attachment::attach(name, options);
    if (!lane) return 1;
    const pid_t heir = ::fork();
    if (heir == 0) {
      ::close(to_parent[0]);
      ::pause();  // holds the inherited lane until killed
      ::_exit(0);
    }
    (void)!::write(to_parent[1], &heir, sizeof heir);
    fault::tell(out, "forked");
    return 0;
  });
  ::close(to_parent[1]);
  REQUIRE(client.read_line() == std::optional<std::string>("forked"));
  pid_t heir = 0;
  REQUIRE(::read(to_parent[0], &heir, sizeof heir) == sizeof heir);
  ::close(to_parent[0]);
  const pid_t parent = client.pid();
  const int exited = client.wait();  // the parent has exited and is reaped
  REQUIRE((WIFEXITED(exited) && WEXITSTATUS(exited) == 0));
  Spawned status({"/bin/sh", "-c", fmt::format("exec {} status --name {} --socket-dir {} --json 1>&2",
                                                IPCFLOOR_BINARY, name, dir.path())});
  REQUIRE(status.wait_exit(std::chrono::seconds(20)).has_value());
  const auto report = nlohmann::json::parse(status.stderr_text(), nullptr, false);
  REQUIRE_MESSAGE(!report.is_discarded(), status.stderr_text());
  const auto& lane = report["lanes"][0];
  CHECK(lane["state"] != "free");  // the heir holds it
  CHECK(lane["owner_pid"] == parent);
  CHECK_MESSAGE(lane.contains("owner_alive"), lane.dump());
  CHECK_MESSAGE(lane.value("owner_alive", true) == false, lane.dump());
  Spawned text({"/bin/sh", "-c", fmt::format("exec {} status --name {} --socket-dir {} 1>&2", IPCFLOOR_BINARY, name,
                                              dir.path())});
  REQUIRE(text.wait_exit(std::chrono::seconds(20)).has_value());
  CHECK_MESSAGE(contains(text.stderr_text(), fmt::format("({})", parent)), text.stderr_text());
  CHECK_MESSAGE(contains(text.stderr_text(), "inherited its connection"), text.stderr_text());
  ::kill(heir, SIGKILL);
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
}

}  // namespace ipcfloor
