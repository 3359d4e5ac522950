#pragma once
// The engine's Unix socket, served by the keeper thread: it accepts connections, admits the
// engine's own uid and the users and groups its PeerPolicy allows (SO_PEERCRED, SO_PEERGROUPS;
// Segment::peers), refusing anyone else with a reply that says who may connect, answers each hand-off request (an observer gets the read-only
// data; a lane's client gets the data and its lane object from the LaneKeeper) and then holds a
// lane's connection as that client's lease: the moment the connection ends, the lane drains.
//
// Connections that hold no lane (hand-offs in progress, observers after their reply) are capped:
// at the cap the longest idle of them is closed to make room, so a newcomer is never refused and
// a lease is never touched. A connection must send its request within a second, and an
// observer's is closed a second after its reply.
//
// Threads: keeper thread only. service() never blocks (epoll with a zero timeout, non-blocking
// sockets); it allocates only to track a new connection.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "engine/engine_event.hpp"
#include "engine/lane_keeper.hpp"
#include "shm/handoff.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {

class HandoffServer {
 public:
  // Watches the segment's listening socket. `segment`, `lanes` and `events` must outlive the
  // server. Setup path: errors are epoll's.
  [[nodiscard]] static Expected<HandoffServer> make(Segment& segment, LaneKeeper& lanes, KeeperEvents& events);

  // Readable when service() has connections or messages to handle. For poll/epoll.
  [[nodiscard]] int event_fd() const noexcept { return epoll_.get(); }
  // When service() must run again at the latest for a connection's deadline (max() when none).
  [[nodiscard]] std::chrono::steady_clock::time_point next_deadline() const noexcept;
  // Handles one batch of requests and departures, then of newcomers, and closes connections past
  // their deadline. The epoll set stays readable while work is left: call again.
  void service() noexcept;
  // From now on every lane request is answered `stopping`.
  void set_stopping() noexcept { stopping_ = true; }
  // Closes every connection: each client sees its connection end (the engine is gone).
  void close_all() noexcept { connections_.clear(); }

 private:
  struct Connection {
    UniqueFd fd;
    enum class Role : std::uint8_t { pending, lane, observer } role = Role::pending;
    std::uint32_t lane = 0;
    bool released = false;  // a ReleaseNotice arrived before the connection ended
    pid_t pid = 0;
    uid_t uid = 0;
    // Pending: the request must come by then. Observer: closed then (it has had its reply and
    // needs nothing more). A lane's connection is its lease and never expires.
    std::chrono::steady_clock::time_point deadline{};
    std::chrono::steady_clock::time_point last_active{};  // accepted, or last message read
  };

  HandoffServer(Segment& segment, LaneKeeper& lanes, KeeperEvents& events) noexcept
      : segment_(&segment), lanes_(&lanes), events_(&events) {}
  void accept_connections() noexcept;
  // Answers a peer the policy does not admit `refused`, naming who may connect (the caller counts
  // it for the note flush_notes writes at most once a second).
  void refuse_peer(Connection& connection) noexcept;
  // accept4 failed with EMFILE/ENFILE: accepts the waiting peer on the reserve descriptor, tells
  // it why and closes it. False when nobody was waiting (nothing to say) or there is no reserve
  // (said once a second); the keeper then stops trying until its next service().
  bool shed_connection(int error) noexcept;
  void warn_at_most_once_a_second(std::string text) noexcept;
  void handle_readable(int fd) noexcept;
  // A pending connection's request, read whole: answered, and the connection's role set.
  void handle_request(Connection& connection, const HandoffRequest& request) noexcept;
  void reply(Connection& connection, HandoffStatus status, std::string_view message,
             std::span<const int> fds = {}, std::uint32_t lane = 0, std::uint64_t generation = 0) noexcept;
  void close_connection(int fd) noexcept;
  // Closes pending and observer connections past their deadline.
  void expire_idle() noexcept;
  // What the keeper refused or closed since the last note, said at most once a second.
  void flush_notes() noexcept;
  // At the connection cap: serves the pending connections whose request already arrived (they
  // are not idle), then closes the longest-idle connection that is not a lane's lease, until
  // a new connection fits. Never refuses the newcomer and never touches a lease.
  void make_room() noexcept;
  // Tells a connection that never sent its request that the engine is busy, and closes it
  // without losing that answer to a reset.
  void shed_idle(int fd) noexcept;
  [[nodiscard]] Connection* find(int fd) noexcept;

  Segment* segment_;
  LaneKeeper* lanes_;
  KeeperEvents* events_;
  UniqueFd epoll_;
  // Held in reserve for the moment accept4 fails for want of descriptors: closed, it lets the
  // keeper accept the waiting peer and tell it why instead of spinning on a listener that stays
  // readable.
  UniqueFd reserve_fd_;
  std::chrono::steady_clock::time_point next_fd_warning_{};  // out-of-descriptor warnings: one a second
  std::uint64_t shed_since_note_ = 0;  // idle connections closed at the cap since the last note
  std::chrono::steady_clock::time_point next_shed_note_{};  // those notes: one a second
  // Connections of one kind refused or closed since the last note (flush_notes).
  struct NoteCount {
    std::uint64_t count = 0;
    pid_t pid = 0;  // the last one's
    uid_t uid = 0;
    void add(pid_t p, uid_t u) noexcept {
      ++count;
      pid = p;
      uid = u;
    }
  };
  NoteCount refused_uid_;       // of a uid the engine does not admit (serve --allow-uid, --allow-group)
  NoteCount dropped_silent_;    // no request within kHandoffPatience
  NoteCount closed_observers_;  // idle after their reply
  std::chrono::steady_clock::time_point next_note_{};
  std::vector<Connection> connections_;
  bool stopping_ = false;
};

}  // namespace ipcfloor
