#pragma once
// The socket baseline's wire protocol (docs/SPEC.md §4, docs/PROTOCOL.md): the study's length-prefixed
// frames byte for byte, three stateful opcodes, and one error reply a client can always tell
// from a success. Everything on the wire is little-endian.
//
//   request : [u32 body_len][u8 opcode][u32 n_bars][u32 n_combos][n_bars x f64][n_combos x 6 x i64]
//   success : [u32 len][len bytes]           (len < 0xFFFFFFFF)
//   error   : [u32 0xFFFFFFFF][u32 code][u32 msg_len][msg_len bytes of UTF-8]
//
// A pure codec: no I/O, no threads, no global state. The scan and decode functions are
// noexcept, never allocate and never read outside the span they are given (tests/fuzz/ feeds
// them arbitrary bytes). The append_* encoders grow a caller-owned buffer by exactly the frame
// they write, so a buffer's size is bounded by the largest frame the caller accepts.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

static_assert(std::endian::native == std::endian::little,
              "the codec copies little-endian wire values straight into host integers and doubles");

// What a request asks for. Wire values: never renumber, only append.
enum class SocketOpcode : std::uint8_t {
  sweep = 0,         // the study's: ship close and combos, get pnl[] then trades[]
  echo = 1,          // the study's: ship close, get the same bytes back
  load = 2,          // keep close as this connection's series; reply checksum and fee
  sweep_loaded = 3,  // combos only, over the loaded series; reply as sweep
  echo_params = 4,   // one combo's 48 bytes back verbatim: the ladder's 48-byte round trip
  use_preloaded = 5, // the server's preloaded series becomes this connection's; reply what it is
  use_strategy = 6,  // a strategy of the server, by name, becomes this connection's; reply its index
};
inline constexpr std::size_t kSocketOpcodeCount = 7;

// Why a request was refused: the `code` of the error reply. Wire values: never renumber.
enum class SocketError : std::uint32_t {
  frame_too_large = 1,       // body_len over the server's maximum (closes the connection)
  length_mismatch = 2,       // body_len disagrees with n_bars/n_combos, or is shorter than 9
  unknown_opcode = 3,        // opcode byte > 6
  window_out_of_range = 4,   // the connection's strategy refuses a combo for the series
  bad_price = 5,             // a close that is NaN, infinite, zero or negative
  no_series_loaded = 6,      // sweep_loaded before any load on this connection
  bad_shape = 7,             // a count this opcode fixes (n_bars = 0, n_combos = 1, ...) is wrong
  truncated = 8,             // the peer ended its half of the stream inside a frame (closes)
  stalled = 9,               // the peer stopped mid-frame, or stopped reading, too long (closes)
  permission_denied = 10,    // the peer's uid may not use this Unix socket (closes)
  too_many_connections = 11, // the server is at its connection limit (closes)
  internal = 12,             // the server failed on a valid request
  no_preloaded_series = 13,  // use_preloaded on a server that holds no series of its own
  idle_timeout = 14,         // no request for the server's idle timeout (closes)
  over_memory_cap = 15,      // a load would take the series the server holds past its cap
  too_costly = 16,           // a combo's work exceeds the server's bound per combo
  no_such_strategy = 17,     // use_strategy named a strategy the server does not hold
};
inline constexpr std::size_t kSocketErrorSlots = 18;  // index by code; slot 0 is unused

// Frame geometry.
inline constexpr std::size_t kLengthPrefixBytes = 4;
inline constexpr std::size_t kBodyHeaderBytes = 9;  // opcode, n_bars, n_combos
inline constexpr std::size_t kComboWireBytes = 48;  // 6 x i64
inline constexpr std::uint32_t kErrorReplyMarker = 0xFFFF'FFFFu;
inline constexpr std::size_t kErrorReplyHeaderBytes = 12;  // marker, code, msg_len
inline constexpr std::uint32_t kMaxErrorMessageBytes = 1024;
inline constexpr std::size_t kEchoParamsRequestBytes = kLengthPrefixBytes + kBodyHeaderBytes + kComboWireBytes;
inline constexpr std::size_t kEchoParamsReplyBytes = kLengthPrefixBytes + kComboWireBytes;
inline constexpr std::size_t kLoadReplyBodyBytes = 16;  // u64 checksum, f64 fee
// use_preloaded's reply: u64 checksum, f64 fee, u64 n_bars, u32 name_len, then the name.
inline constexpr std::size_t kPreloadedReplyFixedBytes = 28;
inline constexpr std::uint32_t kMaxSeriesNameBytes = 256;  // a longer name is cut (UTF-8 safe)
// use_strategy's request carries the name NUL-padded in its one 48-byte combo; its reply is
// u32 the strategy's index, u32 its parameter count, then that many names, each NUL-padded to 32
// bytes.
inline constexpr std::size_t kStrategyNameWireBytes = 32;
inline constexpr std::size_t kUseStrategyReplyFixedBytes = 8;
inline constexpr std::size_t kMaxUseStrategyReplyBodyBytes = kUseStrategyReplyFixedBytes + 6 * kStrategyNameWireBytes;

// Limits on body_len (the u32 prefix, excluding itself). The default fits the 1.2 MB default
// series with room for 1.3 M combos; the hard limit keeps a reply's length below the marker.
inline constexpr std::uint32_t kDefaultMaxFrameBytes = 64u << 20;
inline constexpr std::uint32_t kMinMaxFrameBytes = 64;
inline constexpr std::uint32_t kMaxMaxFrameBytes = 1u << 30;

// Stable lowercase names for logs, counters and error replies ("unknown" outside the enum).
[[nodiscard]] std::string_view to_string(SocketOpcode opcode) noexcept;
[[nodiscard]] std::string_view to_string(SocketError error) noexcept;

// True for the errors after which the server closes the connection (the framing is broken or
// the peer is not welcome); every other error leaves the connection usable.
[[nodiscard]] bool closes_connection(SocketError error) noexcept;

// Little-endian loads and stores at any alignment.
template <class T>
[[nodiscard]] inline T load_le(const std::byte* at) noexcept {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}
template <class T>
inline void store_le(std::byte* at, T value) noexcept {
  std::memcpy(at, &value, sizeof value);
}

// ---- Framing ---------------------------------------------------------------------------------

enum class ScanState : std::uint8_t {
  need_more,  // the buffer holds less than one whole frame
  complete,   // one whole frame starts at the buffer's first byte
  too_large,  // the length prefix is over the limit: nothing after it may be trusted
};

struct RequestScan {
  ScanState state = ScanState::need_more;
  std::uint32_t body_len = 0;  // valid once 4 bytes are buffered
  std::size_t frame_bytes = 0; // 4 + body_len when complete
};

// Looks at the bytes buffered so far for one request frame; checks the length prefix against
// `max_body` before anything else, so a caller can refuse a frame before allocating for it.
[[nodiscard]] RequestScan scan_request(std::span<const std::byte> buffered, std::uint32_t max_body) noexcept;

// ---- Requests --------------------------------------------------------------------------------

// What a decoder found wrong, with the facts for the error message. Trivially copyable, so
// decoding stays allocation-free; describe() turns it into a sentence.
struct SocketFault {
  SocketError error = SocketError::internal;
  std::uint8_t opcode = 0;      // the raw opcode byte, once read
  std::uint32_t n_bars = 0;     // as the request declared them, once read
  std::uint32_t n_combos = 0;
  std::uint64_t index = 0;      // the bar (bad_price) or combo (too_costly)
  std::uint32_t field = 0;      // see below
  std::uint64_t limit = 0;      // see below
  double price = 0.0;           // the close (bad_price)
  std::uint64_t expected = 0;   // body bytes implied by the counts, or the maximum (too_large)
  std::uint64_t actual = 0;     // body bytes received, or the declared length (too_large)
                                // idle_timeout: limit = the timeout in ms
                                // over_memory_cap: actual = bytes asked for, expected = the cap,
                                //   limit = bytes the server already holds for others, field = what
                                //   asked (kMemoryForSeries, kMemoryForFrame, kMemoryForRequest)
                                // too_many_connections: expected = the limit; field =
                                //   kClosedForNewcomer when this idle connection was closed to
                                //   admit a new peer, then limit = its idle time in ms;
                                //   kClosedUnserved, kPeerAtLimit, kKeptForNewPeers (below)
                                // too_costly: index = the combo, actual = its cost, expected = the bound
};

// SocketFault::field for over_memory_cap: what asked for the memory.
inline constexpr std::uint32_t kMemoryForSeries = 0;   // a load's series
inline constexpr std::uint32_t kMemoryForFrame = 1;    // a frame being buffered, from its length prefix
inline constexpr std::uint32_t kMemoryForRequest = 2;  // a request's frame, reply and scratch
// SocketFault::field for too_many_connections: the longest-idle connection, closed for a newcomer.
inline constexpr std::uint32_t kClosedForNewcomer = 1;
// ... a connection that had not completed a frame, closed for a newcomer (limit: ms since accept).
inline constexpr std::uint32_t kClosedUnserved = 2;
// ... refused: its peer (TCP address, or uid) already holds the most one peer may (expected).
inline constexpr std::uint32_t kPeerAtLimit = 3;
// ... refused: its peer already holds connections and the rest (limit) are kept for peers that
// hold none (expected: what the peers that hold some may share).
inline constexpr std::uint32_t kKeptForNewPeers = 4;
// SocketFault::field for permission_denied: besides its own uid (expected) the server admits the
// users and groups of an allow list (serve --allow-uid, --allow-group); actual is the peer's uid.
inline constexpr std::uint32_t kAllowListAdmits = 1;
// SocketFault::field for stalled: the frame arrived slower than the server's floor rate (index:
// the floor in bytes a second, limit: ms since its first byte).
inline constexpr std::uint32_t kBelowFrameRate = 1;

// One full sentence naming what was wrong, e.g. "bar 17 has close nan; every close must be a
// finite number > 0". Allocates.
[[nodiscard]] std::string describe(const SocketFault& fault);

// A decoded request: views into the caller's body buffer (valid while it lives).
struct RequestView {
  SocketOpcode opcode = SocketOpcode::sweep;
  std::uint32_t n_bars = 0;
  std::uint32_t n_combos = 0;
  std::span<const std::byte> close;   // n_bars x f64, unaligned
  std::span<const std::byte> params;  // n_combos x 48 bytes, unaligned

  [[nodiscard]] double close_at(std::size_t i) const noexcept { return load_le<double>(close.data() + 8 * i); }
  [[nodiscard]] Combo combo_at(std::size_t i) const noexcept {
    Combo combo;
    std::memcpy(&combo, params.data() + kComboWireBytes * i, sizeof combo);
    return combo;
  }
};

// Decodes one request body (the body_len bytes after the prefix) and checks, in this order:
// length >= 9 (length_mismatch), opcode (unknown_opcode), body_len == 9 + 8 n_bars + 48 n_combos
// (length_mismatch), the counts the opcode fixes (bad_shape: sweep and load need n_bars >= 2,
// load n_combos = 0, sweep_loaded n_bars = 0, echo_params and use_strategy n_bars = 0 and
// n_combos = 1, use_preloaded n_bars = 0 and n_combos = 0), and every close of sweep and load
// (bad_price). Whether a combo may run is its strategy's to say: the server admits the combos
// with the connection's strategy. Echo payloads are not inspected: they come back verbatim.
[[nodiscard]] std::expected<RequestView, SocketFault> decode_request(std::span<const std::byte> body) noexcept;

// The first close that is not finite and > 0, as a bad_price fault.
[[nodiscard]] std::optional<SocketFault> check_prices(std::span<const std::byte> close) noexcept;

// The name a use_strategy request carries (up to the first NUL of its 48 bytes), or nullopt when
// it holds no NUL within kStrategyNameWireBytes.
[[nodiscard]] std::optional<std::string_view> strategy_name_of(const RequestView& request) noexcept;

// Copies n_bars wire doubles into aligned host doubles. `out` holds at least close.size()/8.
void copy_close(std::span<const std::byte> close, std::span<double> out) noexcept;

// Appends one request frame. Fails with invalid_argument when a count does not fit its u32 or
// the body would exceed `max_body`. Allocates: grows `out` by the frame.
[[nodiscard]] Expected<void> append_request(SocketOpcode opcode, std::span<const double> close,
                                            std::span<const Combo> combos, std::vector<std::byte>& out,
                                            std::uint32_t max_body = kDefaultMaxFrameBytes);

// A use_strategy request for `name` (at most kStrategyNameWireBytes - 1 bytes). Fails with
// invalid_argument for a longer name. Allocates: grows `out` by the frame.
[[nodiscard]] Expected<void> append_use_strategy_request(std::string_view name, std::vector<std::byte>& out);

// The fixed 61-byte echo_params request. Never allocates.
void encode_echo_params_request(const Combo& combo, std::span<std::byte, kEchoParamsRequestBytes> out) noexcept;

// ---- Replies ---------------------------------------------------------------------------------

// Server side. Each appends one whole reply frame to `out`.
void append_sweep_reply(std::span<const BacktestResult> results, std::vector<std::byte>& out);
void append_echo_reply(std::span<const std::byte> close, std::vector<std::byte>& out);
void append_load_reply(std::uint64_t checksum, double fee, std::vector<std::byte>& out);
// `params`: the strategy's parameter names (1..6), each cut to 31 bytes.
void append_use_strategy_reply(std::uint32_t index, std::span<const std::string_view> params, std::vector<std::byte>& out);
void append_echo_params_reply(std::span<const std::byte> params, std::vector<std::byte>& out);
// `name` is cut to kMaxSeriesNameBytes, never inside a UTF-8 sequence.
void append_preloaded_reply(std::uint64_t checksum, double fee, std::uint64_t n_bars, std::string_view name,
                            std::vector<std::byte>& out);
// `message` is cut to kMaxErrorMessageBytes, never inside a UTF-8 sequence.
void append_error_reply(SocketError error, std::string_view message, std::vector<std::byte>& out);

struct ReplyScan {
  ScanState state = ScanState::need_more;  // too_large: a length over the limit, or an error
                                           // reply whose msg_len exceeds kMaxErrorMessageBytes
  bool is_error = false;                   // known once 4 bytes are buffered
  std::uint32_t body_len = 0;              // success: the length prefix
  std::uint32_t error_code = 0;            // error: the code, once 12 bytes are buffered
  std::uint32_t message_len = 0;           // error: msg_len, once 12 bytes are buffered
  std::size_t frame_bytes = 0;             // the whole frame, once known
};

// Client side: looks at the bytes buffered so far for one reply frame.
[[nodiscard]] ReplyScan scan_reply(std::span<const std::byte> buffered, std::uint32_t max_body) noexcept;

// The body of a sweep reply into `out` (one result per combo). False when the body is not
// exactly 16 x out.size() bytes.
[[nodiscard]] bool decode_sweep_reply(std::span<const std::byte> body, std::span<BacktestResult> out) noexcept;

struct LoadReply {
  std::uint64_t checksum = 0;  // fnv1a64 of the close bytes as the server stored them
  double fee = 0.0;            // the fee the server's sweeps use, percentage points per round trip
};
[[nodiscard]] std::optional<LoadReply> decode_load_reply(std::span<const std::byte> body) noexcept;

struct UseStrategyReply {
  std::uint32_t index = 0;        // the strategy's index on the server
  std::uint32_t param_count = 0;  // how many of a combo's six values it uses (1..6)
  std::array<std::string_view, 6> params{};  // their names; views the body
};
[[nodiscard]] std::optional<UseStrategyReply> decode_use_strategy_reply(std::span<const std::byte> body) noexcept;

struct PreloadedReply {
  std::uint64_t checksum = 0;  // fnv1a64 of the server's series bytes
  double fee = 0.0;            // the fee the server's sweeps use
  std::uint64_t n_bars = 0;    // the series' bars
  std::string_view name;       // where the series came from, e.g. "gbm(bars=150000, seed=42)"; views the body
};
// nullopt unless the body is exactly the fixed part plus name_len <= kMaxSeriesNameBytes bytes.
[[nodiscard]] std::optional<PreloadedReply> decode_preloaded_reply(std::span<const std::byte> body) noexcept;

// The message of a complete error reply frame (`frame` starts at the marker), or nullopt when
// it is not one. The view points into `frame`.
[[nodiscard]] std::optional<std::string_view> error_reply_message(std::span<const std::byte> frame) noexcept;

}  // namespace ipcfloor
