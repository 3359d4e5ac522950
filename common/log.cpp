#include "common/log.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace ipcfloor {
namespace {

class LogWriter {
 public:
  void configure(LogLevel level, std::FILE* sink, std::size_t capacity) {
    std::lock_guard guard(mutex_);
    // relaxed: log_enabled only filters; the mutex orders everything the writer sees.
    level_.store(level, std::memory_order_relaxed);
    sink_ = sink;
    capacity_ = capacity == 0 ? 1 : capacity;
  }

  [[nodiscard]] bool enabled(LogLevel level) const noexcept {
    // relaxed: a filter only.
    return level >= level_.load(std::memory_order_relaxed) && level != LogLevel::off;
  }

  void push(LogLevel level, std::string_view text) {
    std::string line = stamp(level);
    line.append(text);
    line.push_back('\n');
    {
      std::lock_guard guard(mutex_);
      if (stopped_) return;
      if (!thread_.joinable()) thread_ = std::thread([this] { write_loop(); });
      if (queue_.size() >= capacity_) return;  // a full queue drops the line: the caller never waits
      queue_.push_back(std::move(line));
    }
    wake_.notify_one();
  }

  void shutdown(unsigned timeout_ms) {
    std::unique_lock lock(mutex_);
    if (!thread_.joinable()) {
      stopped_ = true;
      return;
    }
    drained_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return queue_.empty() && !writing_; });
    stopped_ = true;
    lock.unlock();
    wake_.notify_one();
    // A writer stuck in fwrite on a sink nobody drains would hold exit forever: let it be.
    if (queue_empty_and_idle()) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }

  ~LogWriter() {
    if (thread_.joinable()) shutdown(200);
  }

 private:
  bool queue_empty_and_idle() {
    std::lock_guard guard(mutex_);
    return queue_.empty() && !writing_;
  }

  // Straight to the descriptor, never through stdio: a write stuck on a pipe nobody reads would
  // otherwise hold the FILE's lock, and exit() (which flushes stderr) would wait on it forever.
  static void write_whole(std::FILE* sink, std::string_view line) {
    const int fd = ::fileno(sink);
    if (fd < 0) return;
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t put = ::write(fd, line.data() + done, line.size() - done);
      if (put > 0) {
        done += static_cast<std::size_t>(put);
      } else if (put < 0 && errno == EINTR) {
        continue;
      } else {
        return;  // a closed or broken sink: the line is lost, the caller goes on
      }
    }
  }

  static std::string stamp(LogLevel level) {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    tm utc{};
    ::gmtime_r(&now.tv_sec, &utc);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {:<5} ", utc.tm_year + 1900, utc.tm_mon + 1,
                       utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, now.tv_nsec / 1'000'000, to_string(level));
  }

  void write_loop() {
    // A process's signals are for the threads that handle them: the writer takes none, whatever
    // mask the thread that started it had.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped and drained
      std::string line = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      std::FILE* sink = sink_;
      lock.unlock();
      write_whole(sink, line);  // may block: only this thread waits
      lock.lock();
      writing_ = false;
      if (queue_.empty()) drained_.notify_all();
    }
  }

  std::atomic<LogLevel> level_{LogLevel::info};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<std::string> queue_;
  std::FILE* sink_ = stderr;
  std::size_t capacity_ = 4096;
  bool writing_ = false;
  bool stopped_ = false;
  std::thread thread_;
};

LogWriter& writer() {
  static LogWriter instance;
  return instance;
}

}  // namespace

std::string_view to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warn: return "warn";
    case LogLevel::error: return "error";
    case LogLevel::off: return "off";
  }
  return "unknown";
}

Expected<LogLevel> parse_log_level(std::string_view text) {
  for (const LogLevel level : {LogLevel::debug, LogLevel::info, LogLevel::warn, LogLevel::error, LogLevel::off})
    if (text == to_string(level)) return level;
  return fail(ErrorCode::invalid_argument, "--log-level '{}' is not one of debug, info, warn, error, off", text);
}

void log_configure(LogLevel level, std::FILE* sink, std::size_t capacity) { writer().configure(level, sink, capacity); }

bool log_enabled(LogLevel level) noexcept { return writer().enabled(level); }

void log_line(LogLevel level, std::string_view text) {
  if (writer().enabled(level)) writer().push(level, text);
}


void log_shutdown(unsigned timeout_ms) { writer().shutdown(timeout_ms); }

}  // namespace ipcfloor
