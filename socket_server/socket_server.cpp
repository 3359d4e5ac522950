#include "socket_server/socket_server.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <expected>
#include <limits>
#include <system_error>

#include <fmt/format.h>

#include "socket_server/socket_listener.hpp"
#include "socket_server/socket_request_handler.hpp"
#include "socket_server/socket_thread.hpp"

namespace ipcfloor {
namespace {

using socket_detail::os_error;

constexpr unsigned kMaxThreads = 64;
// The smallest memory cap: an echo_params frame and its reply, with room to spare.
constexpr std::uint64_t kMinLoadedBytes = 4096;

}  // namespace

Expected<std::unique_ptr<SocketServer>> SocketServer::start(const SocketServerOptions& options) {
  if (options.unix_path.empty() && !options.tcp)
    return fail(ErrorCode::invalid_argument, "the socket server needs a Unix socket path or a tcp endpoint");
  if (options.max_frame_bytes < kMinMaxFrameBytes || options.max_frame_bytes > kMaxMaxFrameBytes)
    return fail(ErrorCode::invalid_argument, "max frame {} bytes is outside {}..{}", options.max_frame_bytes,
                kMinMaxFrameBytes, kMaxMaxFrameBytes);
  if (options.stall_timeout < std::chrono::milliseconds(1) || options.stall_timeout > std::chrono::hours(1))
    return fail(ErrorCode::invalid_argument, "frame timeout {} ms is outside 1..3600000", options.stall_timeout.count());
  if (options.threads < 1 || options.threads > kMaxThreads)
    return fail(ErrorCode::invalid_argument, "socket threads {} is outside 1..{}", options.threads, kMaxThreads);
  if (options.max_connections < 1)
    return fail(ErrorCode::invalid_argument, "the connection limit must be at least 1");
  if (options.max_per_peer < 1)
    return fail(ErrorCode::invalid_argument, "the connection limit per peer must be at least 1");
  if (options.keep_active < std::chrono::milliseconds(0) || options.keep_active > std::chrono::hours(1))
    return fail(ErrorCode::invalid_argument, "keep-active time {} ms is outside 0..3600000", options.keep_active.count());
  if (options.min_frame_rate > kMaxMinFrameRate)
    return fail(ErrorCode::invalid_argument, "the floor frame rate {} bytes a second is outside 0..{}",
                options.min_frame_rate, kMaxMinFrameRate);
  if (options.sweep_threads < 1 || options.sweep_threads > kMaxThreads)
    return fail(ErrorCode::invalid_argument, "sweep threads {} is outside 1..{}", options.sweep_threads, kMaxThreads);
  if (options.max_loaded_bytes < kMinLoadedBytes)
    return fail(ErrorCode::invalid_argument, "the memory cap of {} bytes is below {}: no request would fit",
                options.max_loaded_bytes, kMinLoadedBytes);
  if (options.sweep_chunk_cost < 1 || options.sweep_chunk_cost > kMaxSweepChunkCost)
    return fail(ErrorCode::invalid_argument, "sweep chunk cost {} is outside 1..{}", options.sweep_chunk_cost,
                kMaxSweepChunkCost);
  if (!std::isfinite(options.fee))
    return fail(ErrorCode::invalid_argument, "fee {} is not a finite number", options.fee);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (const int cpu : options.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return fail(ErrorCode::invalid_argument, "socket cpu {} is out of range", cpu);
    CPU_SET(cpu, &cpus);
  }

  std::unique_ptr<SocketServer> server(new SocketServer());
  server->budget_ = std::make_unique<socket_detail::SharedBudget>(options.max_loaded_bytes);
  // Of the slots peers that are not the owner may take, the last few are kept for peers that hold
  // none (socket_listener.hpp, PeerLimit).
  const std::size_t others = options.max_connections - std::min(options.owner_reserve, options.max_connections - 1);
  const std::size_t kept = std::min<std::size_t>(kNewPeerReserve, others / 4);
  server->peers_ = std::make_unique<socket_detail::PeerLimit>(
      options.max_per_peer, kept == 0 ? std::numeric_limits<std::size_t>::max() : others - kept);
  server->options_ = options;
  if (!server->options_.strategies) server->options_.strategies = std::make_shared<const StrategyCatalog>();
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) return fail(ErrorCode::io, "eventfd failed: {}", os_error(errno));
  if (!options.unix_path.empty()) {
    const mode_t mode = options.any_uid ? 0666 : options.peers.socket_mode();
    auto fd = socket_detail::open_unix_listener(options.unix_path, mode, server->unix_dev_, server->unix_ino_);
    if (!fd) return std::unexpected(fd.error());
    server->unix_fd_ = *fd;
    server->unix_path_ = options.unix_path;
  }
  if (options.tcp) {
    auto fd = socket_detail::open_tcp_listener(*options.tcp, server->tcp_port_);
    if (!fd) return std::unexpected(fd.error());  // ~SocketServer removes the Unix socket
    server->tcp_fd_ = *fd;
    server->tcp_host_ = options.tcp->host;
  }
  for (unsigned i = 0; i < options.threads; ++i)
    server->workers_.push_back(std::make_unique<socket_detail::ServerThread>(
        server->options_, server->open_connections_, *server->peers_, *server->budget_, server->unix_fd_, server->tcp_fd_,
        server->wake_fd_, i));
  std::vector<socket_detail::ServerThread*> all;
  for (const auto& worker : server->workers_) all.push_back(worker.get());
  for (const auto& worker : server->workers_)
    if (auto ready = worker->init(all); !ready) return std::unexpected(ready.error());
  try {
    for (auto& worker : server->workers_) {
      server->threads_.emplace_back([w = worker.get()] {
        pthread_setname_np(pthread_self(), "ipcf-sock");
        w->run();
      });
      if (!options.cpus.empty()) {
        if (const int rc = pthread_setaffinity_np(server->threads_.back().native_handle(), sizeof cpus, &cpus); rc != 0) {
          std::string list;
          for (const int cpu : options.cpus) list += fmt::format("{}{}", list.empty() ? "" : ",", cpu);
          return fail(ErrorCode::invalid_argument, "cannot pin the socket threads to cpu(s) {}: {}", list, os_error(rc));
        }
      }
    }
  } catch (const std::system_error& error) {
    return fail(ErrorCode::resource, "cannot start a socket server thread: {}", error.what());
  }
  return server;
}

SocketServer::~SocketServer() { stop(); }

void SocketServer::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  // relaxed: a plain flag the sweep workers poll between combos (the relaxed load in
  // RequestHandler::run_combos); the joins below order the rest.
  if (budget_) budget_->stopping.store(true, std::memory_order_relaxed);
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    // The eventfd stays readable (nobody reads it), so every thread's epoll_wait returns.
    [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof one);
  }
  for (auto& thread : threads_)
    if (thread.joinable()) thread.join();
  for (auto& worker : workers_) worker->close_all();  // the workers stay: stats() reads them
  if (unix_fd_ >= 0) close(unix_fd_);
  if (tcp_fd_ >= 0) close(tcp_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  unix_fd_ = tcp_fd_ = wake_fd_ = -1;
  if (!unix_path_.empty()) {
    // Only our own socket: a successor may already have replaced a file we left.
    struct stat current {};
    if (lstat(unix_path_.c_str(), &current) == 0 && static_cast<std::uint64_t>(current.st_dev) == unix_dev_ &&
        static_cast<std::uint64_t>(current.st_ino) == unix_ino_)
      unlink(unix_path_.c_str());
  }
}

SocketServerStats SocketServer::stats() const noexcept {
  SocketServerStats stats;
  for (const auto& worker : workers_) worker->add_to(stats);
  return stats;
}

std::string SocketServer::describe() const {
  std::string text;
  if (!unix_path_.empty())
    text = options_.any_uid ? fmt::format("unix socket {} (mode 0666, any uid)", unix_path_)
                            : fmt::format("unix socket {} (mode {:04o}, {})", unix_path_, options_.peers.socket_mode(),
                                          options_.peers.describe());
  if (tcp_fd_ >= 0 || tcp_port_ != 0) {
    const bool v6 = tcp_host_.find(':') != std::string::npos;
    text += fmt::format("{}tcp {}{}{}:{} (TCP_NODELAY)", text.empty() ? "" : ", ", v6 ? "[" : "", tcp_host_,
                        v6 ? "]" : "", tcp_port_);
  }
  return text;
}

}  // namespace ipcfloor
