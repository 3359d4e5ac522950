#pragma once
// The socket server's listening side (socket_server/socket_server.hpp): the Unix and TCP listening
// sockets, one server thread's epoll set, and the server-wide limit on connections served.
// Setup functions allocate and return Expected; the epoll and limit calls on the serving path
// are noexcept and allocate nothing.

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "common/error.hpp"
#include "socket/socket_protocol.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor::socket_detail {

// The sentence strerror gives for `error`. Allocates.
[[nodiscard]] std::string os_error(int error);

// A listening, non-blocking Unix socket at `path`, or the error naming the path and the OS
// reason. A path over the sockaddr limit, a non-socket file in the way or a live server on it is
// refused; a socket file nobody listens on is stale and replaced. The file gets `mode` (0600; 0666
// with any_uid or an allow list) before listen(). `dev` and `ino` identify the file created, so
// that only it is ever removed.
[[nodiscard]] Expected<int> open_unix_listener(const std::string& path, mode_t mode, std::uint64_t& dev,
                                               std::uint64_t& ino);

// A listening, non-blocking TCP socket on `endpoint` (SO_REUSEADDR), and the port bound (the
// kernel's choice when the endpoint says 0).
[[nodiscard]] Expected<int> open_tcp_listener(const TcpEndpoint& endpoint, std::uint16_t& bound_port);

// "tcp peer ADDR:PORT" ("[ADDR]:PORT" for IPv6), for logs. Allocates.
[[nodiscard]] std::string tcp_peer_name(const sockaddr_storage& address);
// "ADDR" alone: what one TCP peer's connections share, whatever their ports. Allocates.
[[nodiscard]] std::string tcp_peer_address(const sockaddr_storage& address);

// One server thread's epoll set, keyed by fd.
class EpollSet {
 public:
  EpollSet() = default;
  EpollSet(const EpollSet&) = delete;
  EpollSet& operator=(const EpollSet&) = delete;
  ~EpollSet();

  [[nodiscard]] Expected<void> open();
  [[nodiscard]] Expected<void> add(int fd, std::uint32_t events);
  // False, with errno set, when the kernel refused.
  [[nodiscard]] bool modify(int fd, std::uint32_t events) noexcept;
  // epoll_wait: the number of events written to `events`, or -1 with errno set.
  [[nodiscard]] int wait(std::span<epoll_event> events, int timeout_ms) noexcept;

 private:
  int fd_ = -1;
};

// The server-wide limit on connections served, shared by every server thread.
class ConnectionLimit {
 public:
  ConnectionLimit(std::atomic<std::size_t>& open, std::size_t max, std::size_t owner_reserve) noexcept
      : open_(open), max_(max), others_max_(max - std::min(owner_reserve, max - 1)) {}

  // Takes a slot, or returns the refusal when every slot it may take is taken. A peer that is
  // not proven to be the server's own uid may not take the owner's reserve.
  [[nodiscard]] std::optional<SocketFault> claim(bool owner) noexcept;
  void release() noexcept;
  // Whether, after one slot is given back, a claim of this kind would succeed (other threads
  // may take it first).
  [[nodiscard]] bool one_release_admits(bool owner) const noexcept;

 private:
  std::atomic<std::size_t>& open_;
  const std::size_t max_;
  const std::size_t others_max_;
};

// The connections each peer not proven to be the server's own uid holds, shared by every server
// thread: a TCP peer is its address, a Unix peer its uid (PeerCheck::key). Two limits: one peer
// holds at most `max`, and the peers that already hold more than one connection share at most
// `shared` together, so the last slots (up to the connection limit) are kept for peers that hold
// none (or one: a client reconnecting): a few addresses whose connections are never idle cannot
// lock a new peer out. Takes a mutex
// (never on the shm serving thread); claim allocates the first time a peer is seen.
class PeerLimit {
 public:
  enum class Claim : std::uint8_t { taken, peer_at_max, kept_for_new_peers };
  PeerLimit(std::size_t max, std::size_t shared) noexcept : max_(max), shared_(shared) {}

  // Counts one more connection of `key`, or says which limit refuses it (counting nothing).
  [[nodiscard]] Claim claim(const std::string& key);
  // Gives back one connection of `key` (claimed before).
  void release(const std::string& key) noexcept;
  [[nodiscard]] std::size_t shared() const noexcept { return shared_; }

 private:
  const std::size_t max_;
  const std::size_t shared_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::size_t> held_;  // guarded by mutex_; no zero counts
  std::size_t total_ = 0;                              // guarded by mutex_: the sum of held_
};

}  // namespace ipcfloor::socket_detail
