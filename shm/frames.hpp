#pragma once
// The three fixed 64-byte frames that travel through the rings (docs/SPEC.md §3): a request slot
// (client -> engine), a response slot (engine -> client) and, in live mode, a signal slot
// (engine -> subscriber). One slot is one cache line, so a frame never straddles two lines and
// the consumer reads it with one line transfer. docs/PROTOCOL.md draws all three
// (tests/test_docs.cpp holds the drawings to the offsets below).
//
// All three are plain trivially copyable data: they live in shared memory mapped by two
// processes, so they hold no pointers, and every field has a fixed width and offset.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

#include "common/combo.hpp"
#include "common/trade_stats.hpp"

namespace ipcfloor {

// RequestSlot::flags of a BACKTEST: the low byte names the series it runs on (an index into the
// segment's series table), the high byte the strategy (an index into the segment's strategy
// table; 0 is the built-in HMA/HMA3). A SUBSCRIBE names its strategy the same way and its series
// byte is 0. Every other opcode's flags are 0.
inline constexpr std::uint16_t kSeriesIndexMask = 0x00FF;
inline constexpr unsigned kStrategyIndexShift = 8;
[[nodiscard]] constexpr std::uint16_t series_flags(std::uint32_t series_index) noexcept {
  return static_cast<std::uint16_t>(series_index & kSeriesIndexMask);
}
[[nodiscard]] constexpr std::uint16_t request_flags(std::uint32_t series_index, std::uint32_t strategy_index) noexcept {
  return static_cast<std::uint16_t>((series_index & kSeriesIndexMask) | ((strategy_index & 0xFFU) << kStrategyIndexShift));
}

// A request's opcode field: the operation in the low byte (an Opcode), and in bit 8
// kOpcodeWithOptions, which says that the request's options line (RequestOptions, beside its ring
// slot or the exchange line) holds options for it: a bar range, a fee, bars per year, the first
// trade of a TRADES page. Only BACKTEST, STATS and TRADES take options; the rest of the high byte
// is reserved (0).
inline constexpr std::uint16_t kOpcodeMask = 0x00FF;
inline constexpr std::uint16_t kOpcodeWithOptions = 0x0100;
// RequestSlot::flags of an APPEND: paced. The bar is taken only when every subscription's signal
// fits its lane's signal ring now; otherwise nothing is appended and the answer is
// subscribers_behind, naming the lane that is behind, so the writer asks again once it has
// drained (`feed --pace-to-subscribers`): a replay that loses no signal. Unpaced APPENDs never
// wait for anyone, and a full ring drops its signal.
inline constexpr std::uint16_t kAppendPaced = 0x0001;

// What a request asks for. Values are wire values: never renumber, only append.
enum class Opcode : std::uint16_t {
  backtest = 1,   // run one combo, answer pnl and trades
  echo = 2,       // answer the 48 payload bytes verbatim: the transport floor
  echo_bulk = 3,  // copy bytes within the lane's bulk region (BulkEcho): the echo curve
  // Live mode (serve --live). The payload is a LiveAppend, a Combo or nothing, as named.
  append = 4,     // LiveAppend: add one close to the series; the answer's trades = bars now
  subscribe = 5,  // Combo: evaluate it on every new bar and stream SignalSlots to this lane
  snapshot = 6,   // nothing: one SignalSlot per subscription of this lane, now (re-synchronises)
  // One combo with its statistics (docs/STATISTICS.md): pnl and trades as a BACKTEST's, the
  // figures in the answer's record (StatsWire, AnswerRecord beside the response slot).
  stats = 7,
  // One combo's trade list: pnl and trades as a BACKTEST's; the trades from the options'
  // first_trade on, as ipcfloor_trade records, into the lane's bulk region, as many as fit;
  // extra[0] = how many were written, extra[1] = the first one's index. The figures as STATS's.
  trades = 8,
};

// How the engine answered a request. Values are wire values: never renumber, only append.
enum class Status : std::uint16_t {
  ok = 0,
  unknown_opcode = 1,       // the opcode is not one the engine knows
  window_out_of_range = 2,  // a window is outside [1, n_bars]
  reserved_bits_set = 3,    // flags or reserved fields carry bits this version does not define
  // 4 is never sent: it once named "malformed in another way", which no check produces. It stays
  // unused so that no peer built against the older list reads a new status as that one.
  engine_error = 5,       // the engine failed while serving a valid request
  bulk_out_of_range = 6,  // an ECHO_BULK range leaves the lane's bulk region or overlaps itself
  too_costly = 7,         // a BACKTEST whose work exceeds the engine's bound per frame
  not_live = 8,           // a live opcode sent to an engine started without --live
  capacity_full = 9,      // an APPEND to a series already at its --capacity: nothing is overwritten
  bad_price = 10,         // an APPEND whose close is not a finite number > 0
  not_the_writer = 11,    // an APPEND from a lane other than the series' one writer
  no_room = 12,           // a SUBSCRIBE past the lane's subscriptions or their memory
  no_such_series = 13,    // a BACKTEST naming a series index the segment does not hold
  no_such_strategy = 14,  // a BACKTEST or SUBSCRIBE naming a strategy index the engine does not hold
  no_live_step = 15,      // a SUBSCRIBE to a strategy that has no per-bar step (no live part)
  signals_full = 16,      // a SNAPSHOT whose frames do not fit the lane's signal ring now: drain it first
  no_trade_report = 17,   // STATS or TRADES on a version-1 strategy, which reports no trades
  missing_column = 18,    // the strategy requires a column the series lacks (extra[0] = its IPCFLOOR_COLUMN_* bit)
  bad_range = 19,         // a bar range not within the series, or of fewer than 2 bars (extra[1] = the series' bars)
  bad_option = 20,        // an option out of its range: a fee or bars per year not finite and >= 0 / > 0
  // 21-39: reserved. 40-41: the journal (serve --journal). 42-59: kept free for other statuses.
  journal_full = 40,    // an APPEND whose record the journal's disk had no room for: its bar was not added
  journal_failed = 41,  // an APPEND whose record could not be written or synced: its bar was not added
  subscribers_behind = 60,  // a paced APPEND (kAppendPaced) whose signals do not all fit now: not appended, ask again
};

// A stable lowercase name for logs and JSON; "unknown" for values outside the enum.
[[nodiscard]] constexpr std::string_view to_string(Status status) noexcept {
  switch (status) {
    case Status::ok: return "ok";
    case Status::unknown_opcode: return "unknown_opcode";
    case Status::window_out_of_range: return "window_out_of_range";
    case Status::reserved_bits_set: return "reserved_bits_set";
    case Status::engine_error: return "engine_error";
    case Status::bulk_out_of_range: return "bulk_out_of_range";
    case Status::too_costly: return "too_costly";
    case Status::not_live: return "not_live";
    case Status::capacity_full: return "capacity_full";
    case Status::bad_price: return "bad_price";
    case Status::not_the_writer: return "not_the_writer";
    case Status::no_room: return "no_room";
    case Status::no_such_series: return "no_such_series";
    case Status::no_such_strategy: return "no_such_strategy";
    case Status::no_live_step: return "no_live_step";
    case Status::signals_full: return "signals_full";
    case Status::no_trade_report: return "no_trade_report";
    case Status::missing_column: return "missing_column";
    case Status::bad_range: return "bad_range";
    case Status::bad_option: return "bad_option";
    case Status::journal_full: return "journal_full";
    case Status::journal_failed: return "journal_failed";
    case Status::subscribers_behind: return "subscribers_behind";
  }
  return "unknown";
}

// A stable lowercase name for logs and JSON; "unknown" for values outside the enum.
[[nodiscard]] constexpr std::string_view to_string(Opcode opcode) noexcept {
  switch (opcode) {
    case Opcode::backtest: return "backtest";
    case Opcode::echo: return "echo";
    case Opcode::echo_bulk: return "echo_bulk";
    case Opcode::append: return "append";
    case Opcode::subscribe: return "subscribe";
    case Opcode::snapshot: return "snapshot";
    case Opcode::stats: return "stats";
    case Opcode::trades: return "trades";
  }
  return "unknown";
}

// Client -> engine. `seq` is the client's correlation id, echoed in the response.
// `opcode` stays a raw integer (not Opcode) because a peer may send any value and the engine
// must be able to read and reject it without an out-of-range enum.
// `stamp` belongs to the ring: its commit writes ring_stamp(position) there (spsc_ring.hpp),
// so the frame and its "published" mark share the one cache line the consumer waits on.
struct alignas(64) RequestSlot {
  std::uint64_t seq;
  std::uint16_t opcode;  // an Opcode value
  std::uint16_t flags;   // BACKTEST: bits 0-7 the series, bits 8-15 the strategy; SUBSCRIBE: bits 8-15; else 0
  std::uint32_t stamp;   // ring-owned; never written by users
  Combo params;          // the six windows (BACKTEST, ECHO) or a BulkEcho (ECHO_BULK), 48 bytes
};

// A request's 48 payload bytes as the client hands them over: the six windows of a Combo or of a
// C caller's int64_t[6], a BulkEcho, a LiveAppend. A view, so packing copies them once.
using FramePayload = std::span<const std::byte, sizeof(Combo)>;
template <class Payload>
  requires(sizeof(Payload) == sizeof(Combo) && std::is_trivially_copyable_v<Payload>)
[[nodiscard]] FramePayload payload_of(const Payload& payload) noexcept {
  return std::as_bytes(std::span<const Payload, 1>(&payload, 1));
}
// `windows` must point at six int64 values (the C ABI's `const int64_t params[6]`).
[[nodiscard]] inline FramePayload payload_of(const std::int64_t* windows) noexcept {
  return std::as_bytes(std::span<const std::int64_t, 6>(windows, 6));
}

// Packs one request into `slot`: a ring slot the client claimed, or its exchange line. The one
// place where a client turns a request into a frame. Field by field and never the stamp, which
// belongs to the ring or the exchange (the engine may be polling it right now). Hot path:
// noexcept, no allocation.
inline void pack_request(RequestSlot& slot, std::uint64_t seq, Opcode opcode, std::uint16_t flags,
                         FramePayload payload) noexcept {
  slot.seq = seq;
  slot.opcode = static_cast<std::uint16_t>(opcode);
  slot.flags = flags;
  std::memcpy(&slot.params, payload.data(), sizeof slot.params);
}

// The 48-byte payload of an ECHO_BULK request, in place of the Combo: copy `bytes` bytes from
// `in_offset` to `out_offset`, both relative to the start of the client's lane bulk region.
// The engine checks both ranges against the region's size and rejects overlapping ones.
struct BulkEcho {
  std::uint64_t in_offset;
  std::uint64_t out_offset;
  std::uint64_t bytes;
  std::uint64_t unused[3];  // must be 0

  [[nodiscard]] Combo as_params() const noexcept {
    Combo combo;
    std::memcpy(&combo, this, sizeof combo);
    return combo;
  }
  [[nodiscard]] static BulkEcho from_params(const Combo& params) noexcept {
    BulkEcho bulk;
    std::memcpy(&bulk, &params, sizeof bulk);
    return bulk;
  }
};
static_assert(sizeof(BulkEcho) == sizeof(Combo), "BulkEcho fills exactly the 48-byte request payload");
static_assert(std::is_trivially_copyable_v<BulkEcho>, "BulkEcho travels by memcpy as the payload");

// Engine -> client. `seq` and `opcode` repeat the request's, so a pipelining client can match
// answers without keeping the request. The head (seq, opcode, a 16-bit code, the ring's stamp)
// has RequestSlot's layout, with the status where the request has its flags, so the exchange
// line (shm/exchange.hpp) holds a request and then its answer in one shape. The 48 bytes from
// `pnl` to the end are the payload: pnl/trades for BACKTEST, the request's params verbatim for
// ECHO, trades = bytes copied for ECHO_BULK, `extra` for the live opcodes' answers.
struct alignas(64) ResponseSlot {
  std::uint64_t seq;
  std::uint16_t opcode;  // the request's opcode, raw
  std::uint16_t status;  // a Status value
  std::uint32_t stamp;   // ring-owned, as in RequestSlot
  double pnl;
  std::int64_t trades;
  std::int64_t extra[4];

  // Stores the 48 bytes of `combo` over pnl, trades and extra (the ECHO reply).
  // Copies field by field so no access crosses a member boundary.
  void set_echo(const Combo& combo) noexcept {
    unsigned char bytes[sizeof(Combo)];
    std::memcpy(bytes, &combo, sizeof bytes);
    std::memcpy(&pnl, bytes, sizeof pnl);
    std::memcpy(&trades, bytes + 8, sizeof trades);
    std::memcpy(extra, bytes + 16, sizeof extra);
  }

  // The inverse of set_echo: reads the 48 payload bytes back as a Combo.
  [[nodiscard]] Combo echo() const noexcept {
    unsigned char bytes[sizeof(Combo)];
    std::memcpy(bytes, &pnl, sizeof pnl);
    std::memcpy(bytes + 8, &trades, sizeof trades);
    std::memcpy(bytes + 16, extra, sizeof extra);
    Combo combo;
    std::memcpy(&combo, bytes, sizeof combo);
    return combo;
  }
};

// The 48-byte payload of an APPEND: the close, and the writer's own clock reading at the tick,
// which every signal of this bar carries back so a subscriber can measure tick to signal.
struct LiveAppend {
  double close;
  std::uint64_t tick;       // any clock the writer and its subscribers share (TSC, CLOCK_MONOTONIC)
  std::uint64_t unused[4];  // must be 0
  [[nodiscard]] Combo as_params() const noexcept {
    Combo combo;
    std::memcpy(&combo, this, sizeof combo);
    return combo;
  }
  [[nodiscard]] static LiveAppend from_params(const Combo& params) noexcept {
    LiveAppend append;
    std::memcpy(&append, &params, sizeof append);
    return append;
  }
};
static_assert(sizeof(LiveAppend) == sizeof(Combo), "LiveAppend fills exactly the 48-byte request payload");
static_assert(std::is_trivially_copyable_v<LiveAppend>, "LiveAppend travels by memcpy as the payload");

// A request's options (the opcode's kOpcodeWithOptions bit): one 64-byte line per request ring
// slot, at the same index, and one beside the exchange line. The client writes it before it
// publishes the request (the ring's or the exchange's release publishes both); the engine copies
// it once, with the request, and checks it in admission. `present` says which fields count; the
// others, `reserved` and `unused` must be 0.
inline constexpr std::uint32_t kOptionRange = 1;        // from_bar, to_bar
inline constexpr std::uint32_t kOptionFee = 2;          // fee
inline constexpr std::uint32_t kOptionBarsPerYear = 4;  // bars_per_year
inline constexpr std::uint32_t kOptionFirstTrade = 8;   // first_trade (TRADES)
inline constexpr std::uint32_t kOptionsDefined = kOptionRange | kOptionFee | kOptionBarsPerYear | kOptionFirstTrade;
struct alignas(64) RequestOptions {
  std::uint32_t present;
  std::uint32_t reserved;
  std::uint64_t from_bar;  // the bars [from_bar, to_bar) of the series; at least 2 of them
  std::uint64_t to_bar;
  double fee;              // percentage points per round trip, finite, in [0, kMaxFee]
  double bars_per_year;    // finite, in (0, kMaxBarsPerYear]
  std::uint64_t first_trade;
  std::uint64_t unused[2];
};
inline constexpr double kMaxFee = 100.0;                 // a round trip costing its whole stake
inline constexpr double kMaxBarsPerYear = 31'622'400'000.0;  // one bar a millisecond, a leap year long

// The figures of a STATS answer beyond pnl and trades (docs/STATISTICS.md, in its order).
struct StatsWire {
  std::int64_t wins;
  double win_rate;
  double profit_factor;
  double expectancy;
  double best_trade;
  double worst_trade;
  double avg_win;
  double avg_loss;
  double avg_trade_bars;
  double exposure;
  double max_drawdown;
  std::int64_t max_drawdown_bars;
  double sharpe;
  double sortino;
  double calmar;
  std::uint64_t bars;
};

// What an answer carries beyond its response slot: two more cache lines, one record per response
// ring slot (same index) and one beside the exchange line. The engine writes it before it
// publishes the answer; the client reads it after the answer and before it frees the slot. Its
// content follows the answer: a STATS or TRADES answered ok holds StatsWire; a request refused
// window_out_of_range whose response has extra[2] = kRecordWhy holds the strategy's own sentence
// (NUL-terminated); anything else leaves it undefined.
inline constexpr std::int64_t kRecordWhy = 1;
inline constexpr std::size_t kAnswerRecordBytes = 128;
union alignas(64) AnswerRecord {
  StatsWire stats;
  char why[kAnswerRecordBytes];
};

// Whether `answer` comes with an answer record: a STATS or TRADES answered ok, or a refusal in
// its strategy's own words. Pure; both sides use it.
[[nodiscard]] constexpr bool carries_record(const ResponseSlot& answer) noexcept {
  const auto operation = static_cast<Opcode>(answer.opcode & kOpcodeMask);
  if (answer.status == static_cast<std::uint16_t>(Status::ok)) return operation == Opcode::stats || operation == Opcode::trades;
  return answer.status == static_cast<std::uint16_t>(Status::window_out_of_range) && answer.extra[2] == kRecordWhy;
}

// The figures of `stats` on the wire, and back beside the response's pnl and trades.
[[nodiscard]] inline StatsWire to_wire(const TradeStats& s) noexcept {
  return StatsWire{s.wins,     s.win_rate,  s.profit_factor, s.expectancy,     s.best_trade, s.worst_trade,
                   s.avg_win,  s.avg_loss,  s.avg_trade_bars, s.exposure,      s.max_drawdown, s.max_drawdown_bars,
                   s.sharpe,   s.sortino,   s.calmar,        s.bars};
}
[[nodiscard]] inline TradeStats from_wire(double pnl, std::int64_t trades, const StatsWire& w) noexcept {
  return TradeStats{pnl,        trades,     w.wins,           w.win_rate,     w.profit_factor,     w.expectancy,
                    w.best_trade, w.worst_trade, w.avg_win,     w.avg_loss,     w.avg_trade_bars,    w.exposure,
                    w.max_drawdown, w.max_drawdown_bars, w.sharpe, w.sortino,    w.calmar,            w.bars};
}

// Flags of a SignalSlot.
inline constexpr std::uint16_t kSignalGap = 1;       // frames of this lane were dropped before this one
inline constexpr std::uint16_t kSignalSnapshot = 2;  // the answer to a SNAPSHOT, not a new bar
// Never sent by the engine: a client that re-attached after its engine went away sets it on the
// first frame of each subscription it reads from the new engine (clients/reconnect.hpp).
inline constexpr std::uint16_t kSignalRestart = 4;

// Engine -> subscriber, one per subscribed combo per new bar, through the lane's signal ring.
// The state after bar `bar` (0-based over the whole series), as the subscription's strategy's
// per-bar step gives it: its two named values (the built-in's HMA and HMA3), the signal at this
// bar, the position it leaves, and the running pnl and trades, exactly as the strategy's batch
// run would have them after this bar.
struct alignas(64) SignalSlot {
  std::uint64_t bar;
  std::uint32_t stamp;         // ring-owned, as in RequestSlot
  std::uint32_t subscription;  // the id SUBSCRIBE answered, per lane
  double value[2];             // the strategy's two values (value_names); NaN while they warm up
  double pnl;
  std::int64_t trades;
  std::uint64_t tick;     // the APPEND's tick, copied
  std::uint32_t dropped;  // frames of this lane dropped since the last one delivered (saturates)
  std::int8_t cross;      // the signal at this bar: +1 long entry or reversal, -1 short, 0 none
  std::int8_t position;   // +1 long, -1 short, 0 flat
  std::uint16_t flags;    // kSignalGap | kSignalSnapshot
};

// The wire layout. A change here is a protocol change: bump the segment layout version.
static_assert(sizeof(RequestOptions) == 64 && std::is_trivially_copyable_v<RequestOptions>,
              "a request's options are one cache line of plain data");
static_assert(offsetof(RequestOptions, from_bar) == 8 && offsetof(RequestOptions, to_bar) == 16 &&
                  offsetof(RequestOptions, fee) == 24 && offsetof(RequestOptions, bars_per_year) == 32 &&
                  offsetof(RequestOptions, first_trade) == 40,
              "RequestOptions offsets");
static_assert(sizeof(StatsWire) == kAnswerRecordBytes, "the figures fill the answer record exactly");
static_assert(sizeof(AnswerRecord) == kAnswerRecordBytes && alignof(AnswerRecord) == 64 &&
                  std::is_trivially_copyable_v<AnswerRecord>,
              "an answer record is two cache lines of plain data");
static_assert(offsetof(StatsWire, max_drawdown_bars) == 88 && offsetof(StatsWire, bars) == 120, "StatsWire offsets");
static_assert(std::is_trivially_copyable_v<RequestSlot>, "RequestSlot is copied as raw bytes");
static_assert(std::is_standard_layout_v<RequestSlot>, "RequestSlot offsets must be well defined");
static_assert(sizeof(RequestSlot) == 64, "RequestSlot is exactly one cache line");
static_assert(alignof(RequestSlot) == 64, "RequestSlot starts on a cache line");
static_assert(offsetof(RequestSlot, seq) == 0, "RequestSlot.seq offset");
static_assert(offsetof(RequestSlot, opcode) == 8, "RequestSlot.opcode offset");
static_assert(offsetof(RequestSlot, flags) == 10, "RequestSlot.flags offset");
static_assert(offsetof(RequestSlot, stamp) == 12, "RequestSlot.stamp offset");
static_assert(offsetof(RequestSlot, params) == 16, "RequestSlot.params offset");

static_assert(std::is_trivially_copyable_v<ResponseSlot>, "ResponseSlot is copied as raw bytes");
static_assert(std::is_standard_layout_v<ResponseSlot>, "ResponseSlot offsets must be well defined");
static_assert(sizeof(ResponseSlot) == 64, "ResponseSlot is exactly one cache line");
static_assert(alignof(ResponseSlot) == 64, "ResponseSlot starts on a cache line");
static_assert(offsetof(ResponseSlot, seq) == 0, "ResponseSlot.seq offset");
static_assert(offsetof(ResponseSlot, opcode) == offsetof(RequestSlot, opcode), "an answer's opcode sits where its request's does");
static_assert(offsetof(ResponseSlot, status) == offsetof(RequestSlot, flags), "an answer's status sits where its request's flags do");
static_assert(offsetof(ResponseSlot, stamp) == offsetof(RequestSlot, stamp), "both frames keep the stamp at one offset");
static_assert(offsetof(ResponseSlot, pnl) == offsetof(RequestSlot, params), "an answer's payload sits where its request's does");
static_assert(offsetof(ResponseSlot, stamp) == 12, "ResponseSlot.stamp offset");
static_assert(offsetof(ResponseSlot, pnl) == 16, "ResponseSlot.pnl offset");
static_assert(offsetof(ResponseSlot, trades) == 24, "ResponseSlot.trades offset");
static_assert(offsetof(ResponseSlot, extra) == 32, "ResponseSlot.extra offset");
static_assert(sizeof(ResponseSlot) - offsetof(ResponseSlot, pnl) == sizeof(Combo),
              "ResponseSlot payload (pnl..end) holds exactly one echoed Combo");
static_assert(sizeof(double) == 8 && sizeof(std::int64_t) == 8, "payload fields are 8 bytes");
static_assert(std::is_trivially_copyable_v<SignalSlot>, "SignalSlot is copied as raw bytes");
static_assert(std::is_standard_layout_v<SignalSlot>, "SignalSlot offsets must be well defined");
static_assert(sizeof(SignalSlot) == 64, "SignalSlot is exactly one cache line");
static_assert(offsetof(SignalSlot, stamp) == 8, "SignalSlot.stamp offset");
static_assert(offsetof(SignalSlot, value) == 16, "SignalSlot.value offset");
static_assert(offsetof(SignalSlot, tick) == 48, "SignalSlot.tick offset");
static_assert(offsetof(SignalSlot, flags) == 62, "SignalSlot.flags offset");

}  // namespace ipcfloor
