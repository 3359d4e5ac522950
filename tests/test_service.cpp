// The engine as a service: what an operator and the users of a shared host run into. Other users
// attach only when the engine allows them (serve --allow-uid / --allow-group, judged on
// SO_PEERCRED) and they trust its user (IPCFLOOR_ENGINE_UID), and a third user cannot pose as the
// engine; every `status` that prints ipcfloor_up 0 exits non-zero and says why; the log and
// `status` say what is locked in RAM and what is not, and `doctor` judges the memory-lock limit of
// the unit's user; a paced `feed` loses no signal. The multi-user cases make real users with
// useradd, and skip with a message where the suite does not run as root.

#include <doctest/doctest.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shm/liveness.hpp"
#include "shm/segment.hpp"
#include "tests/cli_harness.hpp"

using namespace ipcfloor;
using namespace ipcfloor::cli_test;

namespace {

// The signal lines `signals` prints (without --json): "bar N [params] ...".
std::vector<std::string> signal_lines(const std::string& out) {
  std::vector<std::string> signals;
  for (const std::string& line : lines_of(out))
    if (line.starts_with("bar ")) signals.push_back(line);
  return signals;
}

// The bar a signal line names.
std::int64_t bar_of(const std::string& line) { return std::stoll(line.substr(4)); }

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> rows;
  for (const std::string& line : lines_of(out)) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded()) rows.push_back(row);
  }
  return rows;
}

// Users and a group made with useradd / groupadd for one test, removed at the end of its scope.
// ok() is false (and why() says why) where they cannot be made: not root, no useradd.
class LocalUsers {
 public:
  LocalUsers() : tag_(std::to_string(::getpid() % 100000)) {
    if (::geteuid() != 0) {
      why_ = "not root: useradd needs root";
      return;
    }
    if (::access("/usr/sbin/useradd", X_OK) != 0 || ::access("/usr/sbin/groupadd", X_OK) != 0) {
      why_ = "no /usr/sbin/useradd or groupadd";
      return;
    }
    ok_ = true;
  }
  LocalUsers(const LocalUsers&) = delete;
  LocalUsers& operator=(const LocalUsers&) = delete;
  ~LocalUsers() {
    for (const std::string& user : users_) (void)run_tool({"/usr/sbin/userdel", user});
    for (const std::string& group : groups_) (void)run_tool({"/usr/sbin/groupdel", group});
  }

  [[nodiscard]] bool ok() const noexcept { return ok_; }
  [[nodiscard]] const std::string& why() const noexcept { return why_; }

  // A group "ipcf<tag><letter>"; its gid, or -1.
  gid_t group(char letter) {
    const std::string name = "ipcf" + tag_ + letter;
    if (!run_tool({"/usr/sbin/groupadd", "--system", name})) return static_cast<gid_t>(-1);
    groups_.push_back(name);
    const ::group* found = ::getgrnam(name.c_str());
    return found != nullptr ? found->gr_gid : static_cast<gid_t>(-1);
  }
  // A system user "ipcf<tag><letter>" without a home, in `supplementary` (a group name, or
  // none); a Spawn that runs as it.
  std::optional<Spawn> user(char letter, const std::string& supplementary = {}) {
    const std::string name = "ipcf" + tag_ + letter;
    std::vector<std::string> argv{"/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                  "--user-group"};
    if (!supplementary.empty()) argv.insert(argv.end(), {"--groups", supplementary});
    argv.push_back(name);
    if (!run_tool(argv)) return std::nullopt;
    users_.push_back(name);
    groups_.push_back(name);  // --user-group made it
    const ::passwd* found = ::getpwnam(name.c_str());
    if (found == nullptr) return std::nullopt;
    Spawn as;
    as.uid = found->pw_uid;
    as.gid = found->pw_gid;
    as.groups = {found->pw_gid};
    if (!supplementary.empty())
      if (const ::group* extra = ::getgrnam(supplementary.c_str()); extra != nullptr) as.groups.push_back(extra->gr_gid);
    return as;
  }
  [[nodiscard]] std::string name(char letter) const { return "ipcf" + tag_ + letter; }

 private:
  static bool run_tool(const std::vector<std::string>& argv) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      std::vector<char*> raw;
      for (const std::string& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  std::string tag_;
  bool ok_ = false;
  std::string why_;
  std::vector<std::string> users_, groups_;
};

// `as` running `args`, with `env` and IPCFLOOR_SOCKET_DIR unset (every command names its directory).
Ran run_as(const Spawn& as, const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  Spawn spawn = as;
  spawn.args = args;
  env.push_back("IPCFLOOR_SOCKET_DIR=");
  spawn.env = env;
  spawn.limit = std::chrono::seconds(60);
  return run(spawn);
}

}  // namespace

// ---- Other users: serve --allow-group / --allow-uid, IPCFLOOR_ENGINE_UID ----------------------

TEST_CASE("an engine serving a group: a member who trusts the engine's user attaches, sweeps, subscribes and uses the "
          "Unix socket; anyone else is refused with who may connect, and a third user cannot pose as the engine") {
  LocalUsers users;
  if (!users.ok()) {
    MESSAGE("skipped: " << users.why());
    return;
  }
  const gid_t group = users.group('g');
  REQUIRE(group != static_cast<gid_t>(-1));
  const auto engine_user = users.user('e');
  const auto member = users.user('a', users.name('g'));
  const auto outsider = users.user('b');
  REQUIRE((engine_user && member && outsider));
  const std::string engine_uid = users.name('e');

  // The engine's directory: its own, readable by everyone (as systemd's RuntimeDirectory=).
  TempDir dir;
  REQUIRE(::chown(dir.path.c_str(), *engine_user->uid, engine_user->gid) == 0);
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);
  const std::string name = unique_name("svc");
  const std::string socket = dir.file("sock");
  Spawn serve = *engine_user;
  // A heartbeat of 100 ms: a client on a loaded host does not take a late beat for a hung engine.
  serve.args = {"--name", name, "--socket-dir", dir.path, "--bars", "2000", "--wait", "backoff", "--workers", "0",
                "--heartbeat-ms", "100", "--hugepages", "off", "--live", "--capacity", "4000", "--socket", socket,
                "--allow-group", users.name('g')};
  Served engine(serve);
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  CHECK_MESSAGE(contains(engine.err(), fmt::format("IPCFLOOR_ENGINE_UID={}", *engine_user->uid)), engine.err());
  struct stat socket_file {};
  REQUIRE(::stat(dir.file(name).c_str(), &socket_file) == 0);
  CHECK((socket_file.st_mode & 07777) == 0666);  // who may connect is the engine's SO_PEERCRED check

  const std::vector<std::string> trust{"IPCFLOOR_ENGINE_UID=" + engine_uid};
  // The member, trusting the engine's user: status, a sweep, the socket baseline.
  const Ran status = run_as(*member, {"status", "--name", name, "--socket-dir", dir.path, "--json"}, trust);
  CHECK_MESSAGE(status.code == 0, status.err);
  const Ran swept = run_as(*member, {"sweep", "--name", name, "--socket-dir", dir.path, "--lengths", "6,8", "--json"}, trust);
  CHECK_MESSAGE(swept.code == 0, swept.err);
  CHECK(json_lines(swept.out).size() == 2);
  const Ran over_socket = run_as(*member, {"sweep", "--socket", socket, "--lengths", "6", "--json"});
  CHECK_MESSAGE(over_socket.code == 0, over_socket.err);
  CHECK(json_lines(over_socket.out).size() == 1);

  // The member subscribes and hears the bars it appends.
  Spawn subscriber = *member;
  subscriber.args = {"signals", "--name", name, "--socket-dir", dir.path, "--lengths", "6", "--count", "2",
                     "--idle-exit-s", "20"};
  subscriber.env = trust;
  const int null = ::open("/dev/null", O_RDONLY);
  Background signals(null, subscriber);
  ::close(null);
  for (int i = 0; i < 1000 && !contains(signals.err(), "subscribed"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE_MESSAGE(contains(signals.err(), "subscribed"), signals.err());
  Spawn feed = *member;
  feed.args = {"feed", "--name", name, "--socket-dir", dir.path, "--quiet"};
  feed.env = trust;
  feed.input = "101.5\n102.25\n";
  const Ran fed = run(feed);
  CHECK_MESSAGE(fed.code == 0, fed.err);
  const int heard = signals.finish(0);  // signal 0: only reaps it (it stops after its 2 signals)
  CHECK_MESSAGE(signal_lines(signals.out()).size() == 2, signals.out() << signals.err() << heard);

  // A user outside the group, even trusting the engine's user, is refused by the engine, which
  // says who may connect; the socket baseline says the same.
  const Ran refused = run_as(*outsider, {"status", "--name", name, "--socket-dir", dir.path}, trust);
  CHECK(refused.code == 4);
  CHECK_MESSAGE(contains(refused.err, fmt::format("group {} (gid {})", users.name('g'), group)), refused.err);
  CHECK_MESSAGE(contains(refused.err, "is not allowed"), refused.err);
  const Ran refused_socket = run_as(*outsider, {"sweep", "--socket", socket, "--lengths", "6"});
  CHECK(refused_socket.code == 4);
  CHECK_MESSAGE(contains(refused_socket.err, "may not use this socket"), refused_socket.err);

  // Not trusting the engine's user, the member's client refuses it before it talks, and says how
  // to trust it; --prometheus still prints ipcfloor_up 0, and the exit code says it failed.
  const Ran untrusted = run_as(*member, {"status", "--name", name, "--socket-dir", dir.path, "--prometheus"});
  CHECK(untrusted.code == 4);
  CHECK(contains(untrusted.out, fmt::format("ipcfloor_up{{engine=\"{}\"}} 0", name)));
  CHECK_MESSAGE(contains(untrusted.err, fmt::format("IPCFLOOR_ENGINE_UID={}", *engine_user->uid)), untrusted.err);

  // A third user's engine under the same name in a directory everyone may write (sticky, as
  // /tmp): a client that trusts the engine's user refuses it.
  TempDir open_dir;
  REQUIRE(::chmod(open_dir.path.c_str(), 01777) == 0);
  Spawn impostor = *outsider;
  impostor.args = {"--name", name, "--socket-dir", open_dir.path, "--bars", "2000", "--wait", "backoff",
                   "--workers", "0", "--hugepages", "off", "--allow-group", users.name('g')};
  Served fake(impostor);
  REQUIRE_MESSAGE(fake.ready(), fake.err());
  const Ran fooled = run_as(*member, {"status", "--name", name, "--socket-dir", open_dir.path}, trust);
  CHECK(fooled.code == 4);
  CHECK_MESSAGE(contains(fooled.err, fmt::format("owned by uid {} ({})", *outsider->uid, users.name('b'))), fooled.err);
  CHECK_MESSAGE(contains(fooled.err, "trusts only engines of"), fooled.err);
}

TEST_CASE("serve --allow-uid and --allow-group take names and numbers, and refuse what the host does not know") {
  const Ran user = run({"serve", "--name", unique_name("allow"), "--allow-uid", "no-such-user-ipcf", "--bars", "100"});
  CHECK(user.code == 2);
  CHECK_MESSAGE(contains(user.err, "--allow-uid"), user.err);
  CHECK_MESSAGE(contains(user.err, "'no-such-user-ipcf' is neither a uid"), user.err);
  const Ran group = run({"serve", "--name", unique_name("allow"), "--allow-group", "no-such-group-ipcf", "--bars", "100"});
  CHECK(group.code == 2);
  CHECK_MESSAGE(contains(group.err, "--allow-group"), group.err);
  CHECK_MESSAGE(contains(group.err, "'no-such-group-ipcf' is neither a gid"), group.err);
  const Ran both = run({"serve", "--name", unique_name("allow"), "--allow-uid", "0", "--socket-any-uid", "--no-shm",
                        "--socket", "/tmp/x"});
  CHECK(both.code == 2);
  const Ran trust = run({"status", "--name", unique_name("trust")}, {"IPCFLOOR_ENGINE_UID=no-such-user-ipcf"});
  CHECK(trust.code == 3);
  CHECK_MESSAGE(contains(trust.err, "IPCFLOOR_ENGINE_UID 'no-such-user-ipcf'"), trust.err);
}

// ---- status: every ipcfloor_up 0 exits non-zero and says why --------------------------------

TEST_CASE("status --prometheus prints ipcfloor_up 0 only with a non-zero exit and the reason on stderr: no engine, "
          "the default name, a stopped engine") {
  TempDir empty;
  const std::string name = unique_name("up");
  const std::string up0 = fmt::format("ipcfloor_up{{engine=\"{}\"}} 0", name);
  const Ran none = run({"status", "--name", name, "--socket-dir", empty.path, "--prometheus"});
  CHECK(none.code == 5);
  CHECK(contains(none.out, up0));
  CHECK_MESSAGE(contains(none.err, "no engine serves " + name), none.err);

  const Ran default_name = run({"status", "--socket-dir", empty.path, "--prometheus"});
  CHECK(default_name.code == 5);
  CHECK(contains(default_name.out, "ipcfloor_up{engine=\"ipcfloor\"} 0"));
  CHECK_MESSAGE(contains(default_name.err, "no --name: status looked for the default name 'ipcfloor'"), default_name.err);

  // A stopped engine cannot answer the hand-off: up 0, exit 5, and why.
  Served engine({"--name", name, "--socket-dir", empty.path, "--bars", "1000", "--wait", "block", "--workers", "0"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const Ran up = run({"status", "--name", name, "--socket-dir", empty.path, "--prometheus"});
  CHECK_MESSAGE(up.code == 0, up.err);
  CHECK(contains(up.out, fmt::format("ipcfloor_up{{engine=\"{}\"}} 1", name)));
  REQUIRE(::kill(engine.pid(), SIGSTOP) == 0);
  const Ran stopped = run({"status", "--name", name, "--socket-dir", empty.path, "--prometheus"});
  ::kill(engine.pid(), SIGCONT);
  CHECK(stopped.code == 5);
  CHECK(contains(stopped.out, up0));
  CHECK_MESSAGE(contains(stopped.err, "did not answer"), stopped.err);
}

TEST_CASE("an engine whose heartbeat stopped is not up by the rule status applies, and the age and limit say why") {
  // The rule itself: fresh within max(3 intervals, 1 s); a dead process is never up.
  CHECK(judge_engine_health(true, 1'000'000'000, 1'900'000'000, 10'000'000).up());
  CHECK_FALSE(judge_engine_health(true, 1'000'000'000, 2'100'000'000, 10'000'000).up());
  CHECK(judge_engine_health(true, 1'000'000'000, 2'100'000'000, 400'000'000).up());  // 3 x 400 ms
  CHECK_FALSE(judge_engine_health(false, 1'000'000'000, 1'000'000'000, 10'000'000).up());
  CHECK(heartbeat_limit_ns(10'000'000) == 1'000'000'000);
  // On a real engine: attached, then stopped; its heartbeat ages past the limit.
  TempDir dir;
  const std::string name = unique_name("beat");
  Served engine({"--name", name, "--socket-dir", dir.path, "--bars", "1000", "--wait", "block", "--workers", "0"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  AttachOptions options;
  options.socket_dir = dir.path;
  options.role = HandoffRole::observer;
  auto segment = Attachment::attach(name, options);
  REQUIRE_MESSAGE(segment.has_value(), (segment ? "" : segment.error().message));
  const auto health_now = [&] {
    const DataHeader& h = segment->header();
    // relaxed: a timestamp; only its age matters.
    return judge_engine_health(!segment->engine_hung_up(), h.heartbeat_ns.load(std::memory_order_relaxed),
                               monotonic_ns(), h.heartbeat_interval_ns);
  };
  CHECK(health_now().up());
  REQUIRE(::kill(engine.pid(), SIGSTOP) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  const EngineHealth stale = health_now();
  ::kill(engine.pid(), SIGCONT);
  CHECK(stale.process_alive);
  CHECK_FALSE(stale.heartbeat_fresh());
  CHECK(stale.heartbeat_age_ns > stale.limit_ns);
}

// ---- What is locked in RAM, and the unit's memory-lock limit ---------------------------------

TEST_CASE("serve and status say exactly what is locked in RAM: the data and how many of the lane objects") {
  // An engine whose lane objects cannot be locked: a user without CAP_IPC_LOCK under a 64 KiB limit.
  TempDir dir;
  Spawn serve{.args = {}, .memlock = rlim_t{64} << 10};
  Spawn observer;
  if (::geteuid() == 0) {
    serve.uid = observer.uid = 65534;  // nobody
    serve.gid = observer.gid = 65534;
    serve.groups = observer.groups = {65534};
    REQUIRE(::chown(dir.path.c_str(), 65534, 65534) == 0);
  }
  const std::string name = unique_name("locked");
  serve.args = {"--name", name, "--socket-dir", dir.path, "--bars", "1000", "--wait", "block", "--workers", "0",
                "--hugepages", "off", "--lanes", "2"};
  Served engine(serve);
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  // The log's sentence (after "slots; ") is the one status prints: whatever the data got (a tiny
  // data object fits the limit), no lane object is locked, and both say so.
  const std::string log = engine.err();
  const auto from = log.find("slots; the data is ");
  REQUIRE_MESSAGE(from != std::string::npos, log);
  const std::string said = log.substr(from + 7, log.find('\n', from) - from - 7);
  CHECK_MESSAGE(contains(said, "; none of the 2 lane objects is locked in RAM"), said);
  const Ran text = run_as(observer, {"status", "--name", name, "--socket-dir", dir.path});
  CHECK_MESSAGE(contains(text.out, "memory    " + said), text.out << text.err << said);
  CHECK_MESSAGE(contains(text.out, "2 lane object(s) not locked in RAM"), text.out);
  const Ran json = run_as(observer, {"status", "--name", name, "--socket-dir", dir.path, "--json"});
  const auto status = nlohmann::json::parse(json.out, nullptr, false);
  REQUIRE_MESSAGE(!status.is_discarded(), json.out << json.err);
  CHECK(status["lane_objects_locked"] == 0);
  CHECK(status["degraded"]["lane_objects_not_locked"] == 2);
  for (const auto& lane : status["lanes"]) CHECK(lane["locked"] == false);
}

TEST_CASE("doctor --unit judges the memory-lock limit of the unit's user, not its own") {
  TempDir dir;
  const auto doctor_on = [&](const std::string& service) {
    const std::string unit = dir.file("ipcfloor@.service");
    write_file(unit, "[Unit]\nDescription=x\n\n[Service]\n" + service + "ExecStart=/bin/true\n");
    const Ran ran = run({"doctor", "--json", "--bars", "1000", "--unit", unit});
    return doctor_check(ran.out, "memlock_unit");
  };
  const auto small = doctor_on("User=nobody\nLimitMEMLOCK=64K\n");
  REQUIRE(!small.is_null());
  CHECK(small["level"] == "warn");
  CHECK_MESSAGE(contains(small["finding"].get<std::string>(), "uid 65534 (nobody) with LimitMEMLOCK=64K (64 KiB)"),
                small.dump());
  CHECK(contains(small["fix"].get<std::string>(), "LimitMEMLOCK=infinity"));
  const auto unlimited = doctor_on("User=nobody\nLimitMEMLOCK=infinity\n");
  CHECK_MESSAGE(unlimited["level"] == "ok", unlimited.dump());
  const auto unset = doctor_on("User=nobody\n");
  CHECK_MESSAGE((unset["level"] == "warn" || contains(unset["finding"].get<std::string>(), "DefaultLimitMEMLOCK")),
                unset.dump());
  const auto as_root = doctor_on("LimitMEMLOCK=64K\n");
  CHECK_MESSAGE(as_root["level"] == "ok", as_root.dump());
  CHECK(contains(as_root["finding"].get<std::string>(), "uid 0 (root)"));
  const auto capability = doctor_on("User=nobody\nLimitMEMLOCK=64K\nAmbientCapabilities=CAP_IPC_LOCK\n");
  CHECK_MESSAGE(capability["level"] == "ok", capability.dump());
  // The shipped unit sets LimitMEMLOCK=infinity for its user.
  const Ran shipped = run({"doctor", "--json", "--bars", "1000", "--unit",
                           std::string(IPCFLOOR_SOURCE_DIR) + "/app/systemd/ipcfloor@.service.in"});
  const auto check = doctor_check(shipped.out, "memlock_unit");
  REQUIRE(!check.is_null());
  CHECK_MESSAGE((contains(check["finding"].get<std::string>(), "LimitMEMLOCK=infinity") ||
                 contains(check["finding"].get<std::string>(), "User=ipcfloor, which this host does not know")),
                check.dump());
}

// ---- A paced replay loses no signal ----------------------------------------------------------

TEST_CASE("feed --pace-to-subscribers replays bars back to back into a subscriber with a small signal ring and loses "
          "no signal") {
  constexpr int kPreloaded = 1000;
  constexpr int kReplayed = 3000;
  TempDir dir;
  const std::string name = unique_name("paced");
  const std::string all = dir.file("all.f64");
  REQUIRE(run({"gen", "--bars", std::to_string(kPreloaded + kReplayed), "-o", all}).code == 0);
  Served engine({"--name", name, "--socket-dir", dir.path, "--bars", std::to_string(kPreloaded), "--wait", "backoff",
                 "--workers", "0", "--heartbeat-ms", "100", "--live", "--capacity", std::to_string(kPreloaded + kReplayed),
                 "--signal-capacity", "16"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const int null = ::open("/dev/null", O_RDONLY);
  Background signals(null, Spawn{.args = {"signals", "--name", name, "--socket-dir", dir.path, "--lengths", "6,20",
                                          "--count", std::to_string(2 * kReplayed), "--idle-exit-s", "30"}});
  ::close(null);
  for (int i = 0; i < 1000 && !contains(signals.err(), "subscribed combo 1"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE_MESSAGE(contains(signals.err(), "subscribed combo 1"), signals.err());
  const Ran fed = run({"feed", "--name", name, "--socket-dir", dir.path, "--replay", all, "--pace-to-subscribers"});
  CHECK_MESSAGE(fed.code == 0, fed.err);
  CHECK_MESSAGE(contains(fed.out, fmt::format("appended {} bars", kReplayed)), fed.out);
  CHECK_MESSAGE(contains(fed.out, "paced to its subscribers"), fed.out);
  for (int i = 0; i < 3000 && signal_lines(signals.out()).size() < 2 * kReplayed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  (void)signals.finish(SIGINT);
  const auto heard = signal_lines(signals.out());
  CHECK_MESSAGE(heard.size() == 2 * kReplayed, signals.err());
  bool in_order = true;
  for (std::size_t i = 0; i < heard.size(); ++i) in_order = in_order && bar_of(heard[i]) == kPreloaded + static_cast<std::int64_t>(i / 2);
  CHECK(in_order);
  CHECK_FALSE(contains(signals.err(), "dropped"));
  const auto status = nlohmann::json::parse(run({"status", "--name", name, "--socket-dir", dir.path, "--json"}).out,
                                            nullptr, false);
  REQUIRE(!status.is_discarded());
  CHECK(status["live"]["signals_dropped"] == 0);
  CHECK(status["live"]["signals_sent"] == 2 * kReplayed);
}
