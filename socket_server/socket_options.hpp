#pragma once
// What the socket baseline server is told and what it counts: its options, the series it holds
// for every connection, and its counters. Apart from socket_server.hpp so that the units the
// server is made of (connection, request handler, thread) read them without depending on it.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/peer_policy.hpp"
#include "kernel/strategy_loader.hpp"
#include "socket/socket_protocol.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor {

// A series the server holds for every connection (opcode 5, use_preloaded): the one `ipcfloor
// serve` preloaded. Shared and never written after start, so connections read it without a copy.
struct PreloadedSeries {
  std::vector<double> close;
  std::string name;            // where it came from, e.g. "gbm(bars=150000, seed=42)"
  std::uint64_t checksum = 0;  // fnv1a64 of close's bytes
};

// The work units one chunk of a sweep holds per sweep thread by default; what that takes on a
// measured host is in docs/RELIABILITY.md.
inline constexpr std::uint64_t kDefaultSweepChunkCost = std::uint64_t{1} << 27;
inline constexpr std::uint64_t kMaxSweepChunkCost = std::uint64_t{1} << 40;
// SocketServerOptions::min_frame_rate, bytes a second.
inline constexpr std::uint64_t kDefaultMinFrameRate = 64 * 1024;
inline constexpr std::uint64_t kMaxMinFrameRate = std::uint64_t{1} << 30;

// Of the slots peers not proven to be the owner may take (max_connections - owner_reserve), the
// last kNewPeerReserve (at most a quarter of them) are kept for peers that hold no connection:
// the peers that hold some share the rest, so that a few addresses whose connections are never
// idle cannot lock a new peer out.
inline constexpr std::size_t kNewPeerReserve = 4;

struct SocketServerOptions {
  std::string unix_path;            // empty: no Unix socket
  std::optional<TcpEndpoint> tcp;   // unset: no TCP listener
  double fee = kDefaultFee;         // what sweeps charge per round trip
  std::shared_ptr<const PreloadedSeries> preloaded;  // null: use_preloaded answers no_preloaded_series
  std::uint32_t max_frame_bytes = kDefaultMaxFrameBytes;  // limit on body_len, checked first
  std::chrono::milliseconds stall_timeout{5000};
  // A connection with no frame in progress and no reply pending for this long is closed with
  // idle_timeout: idle peers cannot hold the connection slots. 0: never.
  std::chrono::milliseconds idle_timeout{60'000};
  std::size_t max_connections = 64;
  // Slots only peers of the server's own uid may take (Unix-socket peers, whose uid
  // SO_PEERCRED proves): TCP peers, any local user, get at most max_connections - owner_reserve.
  std::size_t owner_reserve = 4;
  // Connections one peer not proven to be the server's own uid may hold at once: a TCP peer by
  // its address, a Unix peer (any_uid) by its uid. >= 1; above max_connections - owner_reserve
  // it changes nothing.
  std::size_t max_per_peer = 32;
  // A connection that completed a request less than this long ago is never closed to admit a
  // newcomer, so a client that sends a request at least this often keeps its connection
  // whatever others connect. Connections that never completed a frame are closed first.
  std::chrono::milliseconds keep_active{1000};
  // Bytes a second a frame must average from its first byte on, once it has been arriving for
  // kFrameRateGrace (socket_connection.cpp); a slower one is dropped as stalled, so trickling
  // peers cannot hold slots for the whole stall_timeout. 0: no floor.
  std::uint64_t min_frame_rate = kDefaultMinFrameRate;
  // Bytes all connections together may hold: series loaded (opcode 2), frames being buffered,
  // replies being sent and sweep scratch. A frame, load or request past it gets
  // over_memory_cap and the connection stays usable. Not counted: the preloaded series (shared),
  // the buffers a connection keeps between requests (input, reply, sweep scratch: each released
  // past 4 MiB) and the sweep workers' kernel workspaces. >= 4096.
  std::uint64_t max_loaded_bytes = std::uint64_t{1} << 30;
  // The strategies a connection may pick (use_strategy), the built-in one first; null: the
  // built-in alone. Every connection starts on the built-in one.
  std::shared_ptr<const StrategyCatalog> strategies;
  // Bound on one combo's cost in work units (its strategy's cost); 0: none. A sweep holding a
  // costlier combo gets too_costly.
  std::uint64_t max_combo_cost = 0;
  // Work units one chunk of a sweep may hold per sweep thread; a chunk always runs at least one
  // combo. 1..2^40.
  std::uint64_t sweep_chunk_cost = kDefaultSweepChunkCost;
  unsigned threads = 1;              // server threads, each with its own epoll set
  std::vector<int> cpus;             // the threads' affinity; empty: inherited
  unsigned sweep_threads = 1;        // 1..64; > 1: each chunk of a sweep runs on that many workers
  bool any_uid = false;              // Unix socket file 0666 and no SO_PEERCRED uid check
  // Besides the server's own uid, who may use the Unix socket (serve --allow-uid, --allow-group):
  // the file is then 0666 and each peer is admitted by its SO_PEERCRED (ignored with any_uid).
  PeerPolicy peers;
  bool log = true;                   // rejected frames and dropped peers to stderr (rate-limited)
};

// Counters since start. served[] by opcode, rejected[] by SocketError code (slot 0 unused).
struct SocketServerStats {
  std::uint64_t connections_accepted = 0;  // connections served (refused ones not included)
  std::uint64_t connections_refused = 0;   // wrong uid or at the connection limit
  std::uint64_t connections_dropped = 0;   // closed by the server: stalled, truncated, too large
  std::array<std::uint64_t, kSocketOpcodeCount> served{};
  std::array<std::uint64_t, kSocketErrorSlots> rejected{};
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;

  [[nodiscard]] std::uint64_t total_served() const noexcept;
  [[nodiscard]] std::uint64_t total_rejected() const noexcept;
};

// One line for the shutdown report, e.g. "3 connections; served 161 frames (sweep 1, ...);
// rejected 2 (bad_price 1, ...); 1 dropped, 0 refused". Allocates.
[[nodiscard]] std::string format_stats(const SocketServerStats& stats);

}  // namespace ipcfloor
