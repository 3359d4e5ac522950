#include "host/engine_host.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ipcfloor {

// How long the keeper waits at most when there is no segment to ask (sockets only): the sockets
// have threads of their own, so this only bounds how late a lost wake-up would be noticed.
constexpr std::chrono::milliseconds kSocketsOnlyWait{1000};

Expected<std::unique_ptr<EngineHost>> EngineHost::start(EngineHostConfig config) {
  if (!config.shm && !config.sockets)
    return fail(ErrorCode::invalid_argument, "an engine host needs the segment, the sockets, or both");
  std::unique_ptr<EngineHost> host(new EngineHost());
  // Before any thread exists, so that every thread the servers start inherits the mask.
  if (config.take_stop_signals)
    if (auto taken = host->take_stop_signals(); !taken) return std::unexpected(taken.error());
  host->stop_event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!host->stop_event_) return fail(ErrorCode::io, "eventfd failed: {}", std::strerror(errno));
  // Sockets first: a socket path held by a live server fails before a segment exists.
  if (config.sockets) {
    auto started = SocketServer::start(*config.sockets);
    if (!started) return std::unexpected(started.error());
    host->sockets_ = std::move(*started);
  }
  if (config.shm) {
    auto started = ShmEngine::start(std::move(*config.shm));
    if (!started) return std::unexpected(started.error());  // ~SocketServer removes the socket file
    host->shm_ = std::move(*started);
  }
  return host;
}

namespace {

sigset_t stop_signal_set() noexcept {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  return stop_signals;
}

}  // namespace

void block_stop_signals() noexcept {
  const sigset_t stop_signals = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
}

void unblock_stop_signals() noexcept {
  const sigset_t stop_signals = stop_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
}

Expected<void> EngineHost::take_stop_signals() {
  block_stop_signals();
  const sigset_t stop_signals = stop_signal_set();
  signals_.reset(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals_) return fail(ErrorCode::io, "signalfd failed: {}", std::strerror(errno));
  return {};
}

EngineHost::~EngineHost() { stop(); }

int EngineHost::keep_once(const EngineEventSink& sink) {
  pollfd watch[3] = {{signals_.get(), POLLIN, 0}, {stop_event_.get(), POLLIN, 0}, {shm_ ? shm_->event_fd() : -1, POLLIN, 0}};
  const auto timeout = shm_ ? shm_->service_timeout() : kSocketsOnlyWait;
  (void)::poll(watch, 3, static_cast<int>(timeout.count()));
  if (shm_) {
    shm_->service();
    shm_->drain_events(sink);
  }
  signalfd_siginfo info{};
  if (signals_ && ::read(signals_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
    return static_cast<int>(info.ssi_signo);
  std::uint64_t requests = 0;
  if (::read(stop_event_.get(), &requests, sizeof requests) == static_cast<ssize_t>(sizeof requests)) return 0;
  return -1;
}

int EngineHost::run(const EngineEventSink& sink) {
  int ended = -1;
  while (ended < 0) ended = keep_once(sink);
  return ended;
}

void EngineHost::request_stop() noexcept {
  const std::uint64_t one = 1;
  (void)::write(stop_event_.get(), &one, sizeof one);  // a full counter still wakes the keeper
}

void EngineHost::stop(const EngineEventSink& sink) noexcept {
  if (stopped_) return;
  stopped_ = true;
  if (shm_) {
    shm_->stop();
    if (sink) shm_->drain_events(sink);
  }
  if (sockets_) sockets_->stop();
}

}  // namespace ipcfloor
