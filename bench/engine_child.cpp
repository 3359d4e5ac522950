#include "bench/engine_child.hpp"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <fstream>
#include <thread>

#include "shm/segment.hpp"

extern char** environ;

namespace ipcfloor {

std::string self_executable(const std::string& fallback) {
  char path[PATH_MAX];
  const ssize_t got = readlink("/proc/self/exe", path, sizeof path - 1);
  if (got <= 0) return fallback;
  return std::string(path, static_cast<std::size_t>(got));
}

std::string unique_segment_name(const std::string& what) {
  static std::atomic<int> counter{0};
  // relaxed: only distinctness matters.
  return "ipcfloor-" + what + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

EngineChild::EngineChild(std::string binary, std::string name, const std::vector<std::string>& args,
                         std::chrono::milliseconds startup)
    : name_(std::move(name)) {
  std::vector<std::string> storage{binary, "serve", "--name", name_, "--quiet"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A child inherits the spawning thread's cpu mask, and a benchmark thread is usually pinned
  // to the client's core: open the mask to every online cpu for the spawn, then restore it.
  cpu_set_t pinned;
  CPU_ZERO(&pinned);
  const bool have_mask = sched_getaffinity(0, sizeof pinned, &pinned) == 0;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &all);
  if (have_mask) sched_setaffinity(0, sizeof all, &all);
  const int spawned = posix_spawn(&pid_, binary.c_str(), nullptr, nullptr, argv.data(), environ);
  if (have_mask) sched_setaffinity(0, sizeof pinned, &pinned);
  if (spawned != 0) {
    pid_ = -1;
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + startup;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Segment::attach(name_)) {
      up_ = true;
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

EngineChild::~EngineChild() { stop(SIGINT); }

pid_t EngineChild::serving_thread() const {
  if (pid_ <= 0) return -1;
  const std::string task_dir = "/proc/" + std::to_string(pid_) + "/task";
  DIR* dir = opendir(task_dir.c_str());
  if (dir == nullptr) return -1;
  pid_t found = -1;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(task_dir + "/" + entry->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "ipcf-serve") {
      found = static_cast<pid_t>(std::stol(entry->d_name));
      break;
    }
  }
  closedir(dir);
  return found;
}

int EngineChild::stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  pid_ = -1;
  (void)Segment::remove(name_);  // a killed engine leaves its segment behind
  return status;
}

}  // namespace ipcfloor
