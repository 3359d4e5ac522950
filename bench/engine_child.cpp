#include "bench/engine_child.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <fstream>
#include <utility>

#include "shm/segment.hpp"

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
  std::vector<std::string> argv{std::move(binary), "serve", "--name", name_, "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto spawned = ChildProcess::spawn(argv);
  if (!spawned) return;
  process_.emplace(std::move(*spawned));
  up_ = process_->wait_until([&] { return Segment::attach(name_).has_value(); }, startup);
}

EngineChild::~EngineChild() { stop(SIGINT); }

pid_t EngineChild::serving_thread() const {
  if (pid() <= 0) return -1;
  const std::string task_dir = "/proc/" + std::to_string(pid()) + "/task";
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
  if (pid() <= 0) return -1;
  const int status = process_->stop(signal, std::chrono::seconds(5));
  (void)Segment::remove(name_);  // a killed engine leaves its segment behind
  return status;
}

}  // namespace ipcfloor
