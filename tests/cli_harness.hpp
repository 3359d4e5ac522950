#pragma once
// Running the real `ipcfloor` binary the way a script or an operator does, for the command-line
// suites (test_cli, test_cli_workflows): a command with its arguments, environment and standard
// input, bounded in time, and what it printed and returned; `serve` as a child until its ready
// line; a temporary directory. IPCFLOOR_BINARY is the binary's path (tests/CMakeLists.txt).

#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace ipcfloor::cli_test {

struct Ran {
  int code = -1;  // exit code; -1 when killed or timed out
  std::string out, err;
};

inline std::string read_all(int fd) {
  std::string text;
  char buffer[8192];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(got));
  return text;
}

inline int temp_fd() {
  char path[] = "/tmp/ipcfloor-cli-XXXXXX";
  const int fd = ::mkstemp(path);
  ::unlink(path);
  return fd;
}

// How to run the binary once: its arguments, environment changes ("NAME=value"; "NAME=" removes
// it), what stdin holds (bytes, or a path such as a FIFO or /dev/zero), the limits it runs under
// (a runaway read then fails in the child instead of taking the host) and how long it may take
// (then SIGKILL and code -1).
struct Spawn {
  std::vector<std::string> args{};
  std::vector<std::string> env{};
  std::string input{};
  std::string stdin_path{};
  std::optional<rlim_t> address_space{};
  std::optional<rlim_t> memlock{};
  std::optional<rlim_t> open_files{};
  std::chrono::seconds limit{60};
  // Run as this user (root only): its groups, gid and uid are set before exec.
  std::optional<uid_t> uid{};
  gid_t gid = 0;
  std::vector<gid_t> groups{};
};

// In the child, before exec: stdin, the environment and the limits.
inline void prepare_child(const Spawn& spawn, int in, int out, int err) {
  if (!spawn.stdin_path.empty()) in = ::open(spawn.stdin_path.c_str(), O_RDONLY | O_NONBLOCK);
  if (in >= 0 && !spawn.stdin_path.empty()) ::fcntl(in, F_SETFL, ::fcntl(in, F_GETFL) & ~O_NONBLOCK);
  ::dup2(in, STDIN_FILENO);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  for (const std::string& entry : spawn.env) {
    const auto eq = entry.find('=');
    if (eq + 1 == entry.size())
      ::unsetenv(entry.substr(0, eq).c_str());
    else
      ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
  }
  if (spawn.address_space) {
    const rlimit limit{*spawn.address_space, *spawn.address_space};
    ::setrlimit(RLIMIT_AS, &limit);
  }
  if (spawn.memlock) {
    const rlimit limit{*spawn.memlock, *spawn.memlock};
    ::setrlimit(RLIMIT_MEMLOCK, &limit);
  }
  if (spawn.open_files) {
    const rlimit limit{*spawn.open_files, *spawn.open_files};
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (spawn.uid) {
    if (::setgroups(spawn.groups.size(), spawn.groups.data()) != 0 || ::setgid(spawn.gid) != 0 ||
        ::setuid(*spawn.uid) != 0)
      ::_exit(126);
  }
}

// The binary under test: IPCFLOOR_BINARY, or $IPCFLOOR_TEST_BINARY (to run a test against another
// build, such as the one before a fix, and see it fail).
inline std::string binary_under_test() {
  const char* other = std::getenv("IPCFLOOR_TEST_BINARY");
  return other != nullptr && *other != '\0' ? other : IPCFLOOR_BINARY;
}

// Forks the binary with spawn.args after `first` (the subcommand, when the caller fixes one).
inline pid_t start_child(const Spawn& spawn, int in, int out, int err, const std::vector<std::string>& first = {}) {
  std::vector<std::string> argv{binary_under_test()};
  argv.insert(argv.end(), first.begin(), first.end());
  argv.insert(argv.end(), spawn.args.begin(), spawn.args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    prepare_child(spawn, in, out, err);
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

inline Ran run(const Spawn& spawn) {
  const int out = temp_fd(), err = temp_fd(), in = temp_fd();
  REQUIRE(out >= 0);
  REQUIRE(::write(in, spawn.input.data(), spawn.input.size()) == static_cast<ssize_t>(spawn.input.size()));
  ::lseek(in, 0, SEEK_SET);
  const pid_t pid = start_child(spawn, in, out, err);
  Ran ran;
  const auto deadline = std::chrono::steady_clock::now() + spawn.limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (status != -1 && WIFEXITED(status)) ran.code = WEXITSTATUS(status);
  ran.out = read_all(out);
  ran.err = read_all(err);
  ::close(out);
  ::close(err);
  ::close(in);
  return ran;
}

inline Ran run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}, const std::string& input = {},
        std::chrono::seconds limit = std::chrono::seconds(60)) {
  Spawn spawn;
  spawn.args = args;
  spawn.env = env;
  spawn.input = input;
  spawn.limit = limit;
  return run(spawn);
}

inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

inline std::string unique_name(const char* what) {
  static int counter = 0;
  return "ipcfloor-cli-" + std::string(what) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// `ipcfloor serve ARGS` as a child whose stdout and stderr are kept: ready() once its ready line
// came (bounded), err() what it logged so far, stop() SIGTERMs it and returns its exit code.
class Served {
 public:
  explicit Served(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                  std::optional<rlim_t> memlock = std::nullopt)
      : Served(Spawn{.args = args, .env = env, .memlock = memlock}) {}
  // `serve` with spawn.args, its environment, limits and user (spawn.input and spawn.limit are unused).
  explicit Served(const Spawn& spawn) : out_(temp_fd()), err_(temp_fd()) {
    const int in = ::open("/dev/null", O_RDONLY);
    pid_ = start_child(spawn, in, out_, err_, {"serve"});
    ::close(in);
    for (int i = 0; i < 1000 && !ready_; ++i) {
      ready_ = contains(read_all(out_), "ready {");
      int status = 0;
      if (!ready_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        pid_ = -1;
        break;
      }
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  Served(const Served&) = delete;
  Served& operator=(const Served&) = delete;
  ~Served() {
    (void)stop();
    ::close(out_);
    ::close(err_);
  }

  [[nodiscard]] bool ready() const noexcept { return ready_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] std::string err() const { return read_all(err_); }
  // The ready line's fields (null before it came).
  [[nodiscard]] nlohmann::json ready_fields() const {
    for (const std::string& line : lines_of(read_all(out_)))
      if (line.rfind("ready {", 0) == 0) return nlohmann::json::parse(line.substr(6), nullptr, false);
    return nullptr;
  }
  // The exit code when it exited before it was ready (-1 otherwise).
  [[nodiscard]] int exited() const noexcept { return exited_; }

  int stop() {
    if (pid_ <= 0) return exited_;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    exited_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exited_;
  }

 private:
  int out_, err_;
  pid_t pid_ = -1;
  bool ready_ = false;
  int exited_ = -1;
};

// `ipcfloor ARGS` left running, its standard input read from `in` (the read end of a pipe the
// test writes, or /dev/null): out() and err() so far, finish(signal) sends a signal and returns
// the exit code (-1 when the signal itself ended it, or it ran 10 s more). Killed if left running.
class Background {
 public:
  Background(const std::vector<std::string>& args, int in) : Background(in, Spawn{.args = args}) {}
  // `spawn.args` whole; its environment, limits and user apply.
  Background(int in, const Spawn& spawn) : out_(temp_fd()), err_(temp_fd()) { pid_ = start_child(spawn, in, out_, err_); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
    ::close(err_);
  }

  [[nodiscard]] std::string out() const { return read_all(out_); }
  [[nodiscard]] std::string err() const { return read_all(err_); }

  int finish(int signal) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, signal);
    int status = 0;
    for (int i = 0; i < 1000 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return -1;
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  int out_, err_;
  pid_t pid_ = -1;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// The check named `name` of `doctor --json`'s output; null when there is none.
inline nlohmann::json doctor_check(const std::string& json_text, std::string_view name) {
  const auto report = nlohmann::json::parse(json_text, nullptr, false);
  if (report.is_discarded()) return nullptr;
  for (const auto& check : report["checks"])
    if (check["check"] == name) return check;
  return nullptr;
}

// A fresh directory under /tmp, removed with everything in it at the end of the scope.
struct TempDir {
  std::string path;
  TempDir() : path("/tmp/" + unique_name("dir")) { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  [[nodiscard]] std::string file(const std::string& name) const { return path + "/" + name; }
};

}  // namespace ipcfloor::cli_test
