#pragma once
// One engine process's serving side as an object: the shared-memory engine (engine/shm_engine.hpp)
// and/or the socket server (socket_server/socket_server.hpp), the keeper loop that keeps them alive, and
// the way they stop. `ipcfloor serve` is a command line around one; a test or a program that
// embeds the engine runs one in process.
//
// Lifecycle: start() builds and starts both servers (sockets first, so a socket path a live
// server holds fails before a segment exists); run() is the keeper loop, until SIGINT or SIGTERM
// (when the host takes them) or request_stop(); stop() tells clients the engine is stopping,
// stops the serving thread after its current (bounded) frame and the socket server after its
// current combo, and joins them.
//
// Threads: start(), run() and stop() belong to one thread, the keeper. With take_stop_signals,
// start() blocks SIGINT and SIGTERM in the calling thread before it starts any thread, so every
// thread it starts inherits the mask and the signals reach the keeper's signalfd only: call it
// before starting threads of your own that would otherwise take them. request_stop() may be
// called from any thread, and from a signal handler. The keeper never blocks longer than the
// engine asks (its next heartbeat) and never writes a log line itself: events go to the sink.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "engine/shm_engine.hpp"
#include "socket_server/socket_server.hpp"

namespace ipcfloor {

struct EngineHostConfig {
  std::optional<ShmEngineConfig> shm;          // set: serve the segment
  std::optional<SocketServerOptions> sockets;  // set: serve the socket protocol
  bool take_stop_signals = true;               // SIGINT and SIGTERM end run()
};

// Blocks SIGINT and SIGTERM in the calling thread, so that every thread it starts from then on
// inherits the mask and the signals wait for a signalfd. A process that runs an EngineHost which
// takes the stop signals calls this before it starts any thread (a log writer included): a
// thread that does not block them would take a SIGTERM's default action, ending the process
// without the clean stop. Idempotent; async-signal-safe.
void block_stop_signals() noexcept;
// Undoes block_stop_signals() in the calling thread: SIGINT and SIGTERM then take their default
// action (the process ends). For the setup steps before an EngineHost exists that run code which
// may take long (a strategy's self-check), so that the user can still stop them; no thread may
// be started meanwhile.
void unblock_stop_signals() noexcept;

// Where each event of the keeper goes, in order (the caller logs it). Called on the keeper thread.
using EngineEventSink = std::function<void(const EngineEvent&)>;

class EngineHost {
 public:
  // Starts what `config` asks for. Errors: invalid_argument when it asks for nothing; the socket
  // server's and the engine's own (a started socket server is stopped again, and its socket file
  // removed, when the engine then fails); io when the signalfd cannot be made.
  [[nodiscard]] static Expected<std::unique_ptr<EngineHost>> start(EngineHostConfig config);

  EngineHost(const EngineHost&) = delete;
  EngineHost& operator=(const EngineHost&) = delete;
  ~EngineHost();  // stop(); then the engine's socket and lock file, and the socket server's socket, go

  // Keeper: serves hand-offs, departures and the heartbeat, passing every event to `sink`, until
  // a stop signal or request_stop(). Returns the signal that ended it (SIGINT, SIGTERM), or 0 for
  // request_stop().
  int run(const EngineEventSink& sink);

  // Any thread, async-signal-safe (one write to an eventfd): makes run() return soon.
  void request_stop() noexcept;

  // Keeper: stops both servers (see above) and passes the last events to `sink`. Idempotent.
  void stop(const EngineEventSink& sink = {}) noexcept;

  // The servers started (null when not asked for). Keeper thread for anything but the const
  // accessors of the segment.
  [[nodiscard]] ShmEngine* shm() const noexcept { return shm_.get(); }
  [[nodiscard]] SocketServer* sockets() const noexcept { return sockets_.get(); }

 private:
  EngineHost() = default;
  [[nodiscard]] Expected<void> take_stop_signals();
  // One turn of the keeper: waits for the engine, a signal or a stop request (no longer than the
  // engine's next heartbeat), then services the engine. Returns the signal taken, -1 for none.
  int keep_once(const EngineEventSink& sink);

  UniqueFd signals_;      // signalfd for SIGINT/SIGTERM; empty when the host does not take them
  UniqueFd stop_event_;   // eventfd: request_stop() writes it
  std::unique_ptr<SocketServer> sockets_;
  std::unique_ptr<ShmEngine> shm_;
  bool stopped_ = false;
};

}  // namespace ipcfloor
