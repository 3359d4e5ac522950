#include "bench/engine_child.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
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
  std::vector<std::string> argv{std::move(binary), "serve", "--name", name_, "--quiet", "--log-level", "error"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto spawned = ChildProcess::spawn(argv);
  if (!spawned) return;
  process_.emplace(std::move(*spawned));
  up_ = process_->wait_until(
      [&] {
        AttachOptions observer;
        observer.role = HandoffRole::observer;
        observer.timeout = std::chrono::milliseconds(200);
        return Attachment::attach(name_, observer).has_value();
      },
      startup);
}

EngineChild::~EngineChild() { stop(SIGINT); }

int EngineChild::stop(int signal) {
  if (pid() <= 0) return -1;
  const int status = process_->stop(signal, std::chrono::seconds(5));
  (void)Segment::remove_stale(name_, default_socket_dir());  // a killed engine leaves its socket and lock file behind
  return status;
}

}  // namespace ipcfloor
