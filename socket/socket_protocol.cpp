#include "socket/socket_protocol.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// Body bytes a request with these counts must have. Cannot overflow: < 2^39.
constexpr std::uint64_t body_bytes_for(std::uint64_t n_bars, std::uint64_t n_combos) noexcept {
  return kBodyHeaderBytes + 8 * n_bars + kComboWireBytes * n_combos;
}

SocketFault fault_for(SocketError error, std::uint8_t opcode, std::uint32_t n_bars, std::uint32_t n_combos) noexcept {
  SocketFault fault;
  fault.error = error;
  fault.opcode = opcode;
  fault.n_bars = n_bars;
  fault.n_combos = n_combos;
  return fault;
}

void append_u32(std::vector<std::byte>& out, std::uint32_t value) {
  const std::size_t at = out.size();
  out.resize(at + 4);
  store_le(out.data() + at, value);
}

void append_bytes(std::vector<std::byte>& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// The longest prefix of `text` of at most `limit` bytes that does not end inside a UTF-8
// sequence (continuation bytes are 10xxxxxx).
std::string_view utf8_prefix(std::string_view text, std::size_t limit) noexcept {
  if (text.size() <= limit) return text;
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0u) == 0x80u) --end;
  return text.substr(0, end);
}

}  // namespace

std::string_view to_string(SocketOpcode opcode) noexcept {
  switch (opcode) {
    case SocketOpcode::sweep: return "sweep";
    case SocketOpcode::echo: return "echo";
    case SocketOpcode::load: return "load";
    case SocketOpcode::sweep_loaded: return "sweep_loaded";
    case SocketOpcode::echo_params: return "echo_params";
    case SocketOpcode::use_preloaded: return "use_preloaded";
    case SocketOpcode::use_strategy: return "use_strategy";
  }
  return "unknown";
}

std::string_view to_string(SocketError error) noexcept {
  switch (error) {
    case SocketError::frame_too_large: return "frame_too_large";
    case SocketError::length_mismatch: return "length_mismatch";
    case SocketError::unknown_opcode: return "unknown_opcode";
    case SocketError::window_out_of_range: return "window_out_of_range";
    case SocketError::bad_price: return "bad_price";
    case SocketError::no_series_loaded: return "no_series_loaded";
    case SocketError::bad_shape: return "bad_shape";
    case SocketError::truncated: return "truncated";
    case SocketError::stalled: return "stalled";
    case SocketError::permission_denied: return "permission_denied";
    case SocketError::too_many_connections: return "too_many_connections";
    case SocketError::internal: return "internal";
    case SocketError::no_preloaded_series: return "no_preloaded_series";
    case SocketError::idle_timeout: return "idle_timeout";
    case SocketError::over_memory_cap: return "over_memory_cap";
    case SocketError::too_costly: return "too_costly";
    case SocketError::no_such_strategy: return "no_such_strategy";
  }
  return "unknown";
}

bool closes_connection(SocketError error) noexcept {
  switch (error) {
    case SocketError::frame_too_large:
    case SocketError::truncated:
    case SocketError::stalled:
    case SocketError::permission_denied:
    case SocketError::too_many_connections:
    case SocketError::idle_timeout: return true;
    default: return false;
  }
}

RequestScan scan_request(std::span<const std::byte> buffered, std::uint32_t max_body) noexcept {
  RequestScan scan;
  if (buffered.size() < kLengthPrefixBytes) return scan;
  scan.body_len = load_le<std::uint32_t>(buffered.data());
  if (scan.body_len > max_body) {
    scan.state = ScanState::too_large;
    return scan;
  }
  const std::size_t frame = kLengthPrefixBytes + scan.body_len;
  if (buffered.size() < frame) return scan;
  scan.state = ScanState::complete;
  scan.frame_bytes = frame;
  return scan;
}

namespace {

// over_memory_cap, by what asked for the memory (SocketFault::field).
std::string describe_memory_cap(const SocketFault& fault) {
  const std::uint64_t total = fault.limit + fault.actual;
  if (fault.field == kMemoryForFrame)
    return fmt::format("a frame of {} bytes would take the memory this server holds for its connections (series, "
                       "frames, replies) to {} bytes, past its cap of {} bytes (serve --max-loaded-mb); it was "
                       "skipped: send it again once other requests have finished, or send smaller frames",
                       fault.actual, total, fault.expected);
  if (fault.field == kMemoryForRequest)
    return fmt::format("this request needs {} bytes (its frame, reply and scratch), which would take the memory "
                       "this server holds for its connections to {} bytes, past its cap of {} bytes (serve "
                       "--max-loaded-mb); send it again once other requests have finished, or split it",
                       fault.actual, total, fault.expected);
  return fmt::format("loading {} bytes would take the memory this server holds for its connections (series, "
                     "frames, replies) to {} bytes, past its cap of {} bytes; use_preloaded (opcode 5) needs no "
                     "memory of its own",
                     fault.actual, total, fault.expected);
}

// "opcode 3 (sweep_loaded)", or "opcode 9" for one the protocol does not know.
std::string opcode_label(const SocketFault& fault) {
  return fault.opcode < kSocketOpcodeCount
           ? fmt::format("opcode {} ({})", fault.opcode, to_string(static_cast<SocketOpcode>(fault.opcode)))
           : fmt::format("opcode {}", fault.opcode);
}

// The counts an opcode does not accept, in its own words.
std::string describe_bad_shape(const SocketFault& fault) {
  switch (static_cast<SocketOpcode>(fault.opcode)) {
    case SocketOpcode::sweep:
      return fmt::format("sweep (opcode 0) needs n_bars >= 2; got n_bars {}", fault.n_bars);
    case SocketOpcode::load:
      return fmt::format("load (opcode 2) needs n_bars >= 2 and n_combos 0; got n_bars {}, n_combos {}",
                         fault.n_bars, fault.n_combos);
    case SocketOpcode::sweep_loaded:
      return fmt::format("sweep_loaded (opcode 3) carries no bars: n_bars must be 0, got {}", fault.n_bars);
    case SocketOpcode::echo_params:
      return fmt::format("echo_params (opcode 4) needs n_bars 0 and n_combos 1; got n_bars {}, n_combos {}",
                         fault.n_bars, fault.n_combos);
    case SocketOpcode::use_preloaded:
      return fmt::format("use_preloaded (opcode 5) carries nothing: n_bars and n_combos must be 0; got n_bars {}, "
                         "n_combos {}",
                         fault.n_bars, fault.n_combos);
    case SocketOpcode::use_strategy:
      return fmt::format("use_strategy (opcode 6) carries the name in one 48-byte combo: n_bars 0 and n_combos "
                         "1; got n_bars {}, n_combos {}",
                         fault.n_bars, fault.n_combos);
    case SocketOpcode::echo: break;
  }
  return fmt::format("{} has counts it does not accept: n_bars {}, n_combos {}", opcode_label(fault), fault.n_bars,
                     fault.n_combos);
}

// Why a connection was refused or closed for another: the server's connection limits.
std::string describe_refused_connection(const SocketFault& fault) {
  if (fault.field == kClosedUnserved)
    return fmt::format("closed {} ms after connecting without a whole request, to admit a new peer: the server "
                       "serves a maximum of {} connections and closes those that never completed a frame first",
                       fault.limit, fault.expected);
  if (fault.field == kPeerAtLimit)
    return fmt::format("this peer (its address, or its uid) already holds the maximum of {} connections one peer "
                       "may; use one of them, or try again when one has closed",
                       fault.expected);
  if (fault.field == kKeptForNewPeers)
    return fmt::format("this peer (its address, or its uid) already holds connections, and the peers that do share "
                       "at most {}: the server keeps its last {} slots for peers that hold none; use one of this "
                       "peer's connections, or try again when one has closed",
                       fault.expected, fault.limit);
  if (fault.field == kClosedForNewcomer)
    return fmt::format("closed as the longest-idle connection ({} ms without a request) to admit a new peer: the "
                       "server serves a maximum of {} connections; connect again when you have a request",
                       fault.limit, fault.expected);
  return fmt::format("the server already serves its maximum of {} connections, none of them idle; try again when "
                     "one has finished",
                     fault.expected);
}

}  // namespace

std::string describe(const SocketFault& fault) {
  switch (fault.error) {
    case SocketError::frame_too_large:
      return fmt::format("the frame's body length {} bytes exceeds the server's maximum of {} bytes", fault.actual,
                         fault.expected);
    case SocketError::length_mismatch:
      if (fault.actual < kBodyHeaderBytes)
        return fmt::format("the body is {} bytes, shorter than the 9-byte header [u8 opcode][u32 n_bars][u32 n_combos]",
                           fault.actual);
      return fmt::format("{} declares n_bars {} and n_combos {}, which take {} body bytes (9 + 8 x n_bars + 48 x "
                         "n_combos), but body_len is {}",
                         opcode_label(fault), fault.n_bars, fault.n_combos, fault.expected, fault.actual);
    case SocketError::unknown_opcode:
      return fmt::format("opcode {} is unknown; known: 0 sweep, 1 echo, 2 load, 3 sweep_loaded, 4 echo_params, "
                         "5 use_preloaded, 6 use_strategy",
                         fault.opcode);
    case SocketError::window_out_of_range:
      return fmt::format("combo {}: the connection's strategy refuses it for a series of {} bars", fault.index,
                         fault.limit);
    case SocketError::no_such_strategy:
      return "use_strategy (opcode 6) named a strategy this server does not hold, or no NUL-terminated name of at "
             "most 31 bytes";
    case SocketError::bad_price:
      return fmt::format("bar {}: close {} is not a finite positive price", fault.index, fault.price);
    case SocketError::no_series_loaded:
      return "sweep_loaded (opcode 3) needs a series: send load (opcode 2) or use_preloaded (opcode 5) on this "
             "connection first";
    case SocketError::no_preloaded_series:
      return "this server holds no series of its own (it was started with --no-shm and without --data or --bars): "
             "ship one with load (opcode 2)";
    case SocketError::bad_shape: return describe_bad_shape(fault);
    case SocketError::truncated:
      return fmt::format("the connection ended inside a frame: {} of its {} bytes arrived", fault.actual,
                         fault.expected);
    case SocketError::stalled:
      if (fault.field == kBelowFrameRate)
        return fmt::format("the frame arrives slower than the server's floor of {} bytes a second ({} of {} bytes in {} "
                           "ms); dropped",
                           fault.index, fault.actual, fault.expected, fault.limit);
      return fmt::format("no progress for {} ms inside a frame ({} of {} bytes arrived) or on a reply; dropped",
                         fault.limit, fault.actual, fault.expected);
    case SocketError::permission_denied:
      if (fault.field == kAllowListAdmits)
        return fmt::format("uid {} may not use this socket: only uid {} (the server's) and the users and groups its "
                           "`serve --allow-uid` and `--allow-group` name may", fault.actual, fault.expected);
      return fmt::format("uid {} may not use this socket: only uid {} (the server's) may; its operator lets others in "
                         "with `serve --allow-uid` or `--allow-group`", fault.actual, fault.expected);
    case SocketError::too_many_connections: return describe_refused_connection(fault);
    case SocketError::idle_timeout:
      return fmt::format("no request for {} ms: idle connections are closed so that they cannot hold the server's "
                         "connection slots",
                         fault.limit);
    case SocketError::over_memory_cap: return describe_memory_cap(fault);
    case SocketError::too_costly:
      return fmt::format("combo {}: its work ({} multiply-adds) exceeds the server's bound of {} per combo "
                         "(serve --max-frame-ms)",
                         fault.index, fault.actual, fault.expected);
    case SocketError::internal: break;
  }
  return "the server failed on a valid request";
}

std::optional<SocketFault> check_prices(std::span<const std::byte> close) noexcept {
  const std::size_t n = close.size() / 8;
  for (std::size_t i = 0; i < n; ++i) {
    const double price = load_le<double>(close.data() + 8 * i);
    // One comparison rejects NaN too: NaN > 0 is false.
    if (!(price > 0.0) || !std::isfinite(price)) {
      SocketFault fault;
      fault.error = SocketError::bad_price;
      fault.index = i;
      fault.price = price;
      return fault;
    }
  }
  return std::nullopt;
}

std::optional<std::string_view> strategy_name_of(const RequestView& request) noexcept {
  if (request.params.size() < kStrategyNameWireBytes) return std::nullopt;
  const auto* text = reinterpret_cast<const char*>(request.params.data());
  const std::string_view wire(text, kStrategyNameWireBytes);
  const std::size_t end = wire.find('\0');
  if (end == std::string_view::npos) return std::nullopt;
  return wire.substr(0, end);
}

std::expected<RequestView, SocketFault> decode_request(std::span<const std::byte> body) noexcept {
  if (body.size() < kBodyHeaderBytes) {
    SocketFault fault = fault_for(SocketError::length_mismatch, 0, 0, 0);
    fault.actual = body.size();
    fault.expected = kBodyHeaderBytes;
    return std::unexpected(fault);
  }
  const auto opcode = static_cast<std::uint8_t>(body[0]);
  const auto n_bars = load_le<std::uint32_t>(body.data() + 1);
  const auto n_combos = load_le<std::uint32_t>(body.data() + 5);
  if (opcode >= kSocketOpcodeCount) return std::unexpected(fault_for(SocketError::unknown_opcode, opcode, n_bars, n_combos));
  const std::uint64_t expected = body_bytes_for(n_bars, n_combos);
  if (expected != body.size()) {
    SocketFault fault = fault_for(SocketError::length_mismatch, opcode, n_bars, n_combos);
    fault.expected = expected;
    fault.actual = body.size();
    return std::unexpected(fault);
  }
  RequestView view;
  view.opcode = static_cast<SocketOpcode>(opcode);
  view.n_bars = n_bars;
  view.n_combos = n_combos;
  view.close = body.subspan(kBodyHeaderBytes, 8 * std::size_t{n_bars});
  view.params = body.subspan(kBodyHeaderBytes + 8 * std::size_t{n_bars});

  bool shape_ok = true;
  switch (view.opcode) {
    case SocketOpcode::sweep: shape_ok = n_bars >= 2; break;
    case SocketOpcode::echo: break;
    case SocketOpcode::load: shape_ok = n_bars >= 2 && n_combos == 0; break;
    case SocketOpcode::sweep_loaded: shape_ok = n_bars == 0; break;
    case SocketOpcode::echo_params: shape_ok = n_bars == 0 && n_combos == 1; break;
    case SocketOpcode::use_preloaded: shape_ok = n_bars == 0 && n_combos == 0; break;
    case SocketOpcode::use_strategy: shape_ok = n_bars == 0 && n_combos == 1; break;
  }
  if (!shape_ok) return std::unexpected(fault_for(SocketError::bad_shape, opcode, n_bars, n_combos));

  if (view.opcode == SocketOpcode::sweep || view.opcode == SocketOpcode::load) {
    if (auto fault = check_prices(view.close)) {
      fault->opcode = opcode;
      fault->n_bars = n_bars;
      fault->n_combos = n_combos;
      return std::unexpected(*fault);
    }
  }
  return view;
}

void copy_close(std::span<const std::byte> close, std::span<double> out) noexcept {
  if (close.size() < 8) return;  // memcpy must not see the null data() of an empty span
  std::memcpy(out.data(), close.data(), (close.size() / 8) * 8);
}

Expected<void> append_request(SocketOpcode opcode, std::span<const double> close, std::span<const Combo> combos,
                              std::vector<std::byte>& out, std::uint32_t max_body) {
  constexpr std::uint64_t kU32Max = std::numeric_limits<std::uint32_t>::max();
  if (close.size() > kU32Max)
    return fail(ErrorCode::invalid_argument, "{} bars do not fit the protocol's u32 n_bars", close.size());
  if (combos.size() > kU32Max)
    return fail(ErrorCode::invalid_argument, "{} combos do not fit the protocol's u32 n_combos", combos.size());
  const std::uint64_t body = body_bytes_for(close.size(), combos.size());
  if (body > max_body)
    return fail(ErrorCode::invalid_argument,
                "a {} request of {} bars and {} combos takes {} body bytes, over the frame limit of {} bytes",
                to_string(opcode), close.size(), combos.size(), body, max_body);
  out.reserve(out.size() + kLengthPrefixBytes + body);
  append_u32(out, static_cast<std::uint32_t>(body));
  out.push_back(static_cast<std::byte>(opcode));
  append_u32(out, static_cast<std::uint32_t>(close.size()));
  append_u32(out, static_cast<std::uint32_t>(combos.size()));
  append_bytes(out, std::as_bytes(close));
  append_bytes(out, std::as_bytes(combos));
  return {};
}

void encode_echo_params_request(const Combo& combo, std::span<std::byte, kEchoParamsRequestBytes> out) noexcept {
  store_le(out.data(), static_cast<std::uint32_t>(kBodyHeaderBytes + kComboWireBytes));
  out[4] = static_cast<std::byte>(SocketOpcode::echo_params);
  store_le(out.data() + 5, std::uint32_t{0});
  store_le(out.data() + 9, std::uint32_t{1});
  std::memcpy(out.data() + 13, &combo, sizeof combo);
}

void append_sweep_reply(std::span<const BacktestResult> results, std::vector<std::byte>& out) {
  const std::size_t n = results.size();
  const std::size_t at = out.size();
  out.resize(at + kLengthPrefixBytes + 16 * n);
  std::byte* base = out.data() + at;
  store_le(base, static_cast<std::uint32_t>(16 * n));
  for (std::size_t i = 0; i < n; ++i) {
    store_le(base + 4 + 8 * i, results[i].pnl);
    store_le(base + 4 + 8 * n + 8 * i, results[i].trades);
  }
}

void append_echo_reply(std::span<const std::byte> close, std::vector<std::byte>& out) {
  out.reserve(out.size() + kLengthPrefixBytes + close.size());
  append_u32(out, static_cast<std::uint32_t>(close.size()));
  append_bytes(out, close);
}

void append_load_reply(std::uint64_t checksum, double fee, std::vector<std::byte>& out) {
  const std::size_t at = out.size();
  out.resize(at + kLengthPrefixBytes + kLoadReplyBodyBytes);
  store_le(out.data() + at, static_cast<std::uint32_t>(kLoadReplyBodyBytes));
  store_le(out.data() + at + 4, checksum);
  store_le(out.data() + at + 12, fee);
}

void append_use_strategy_reply(std::uint32_t index, std::span<const std::string_view> params, std::vector<std::byte>& out) {
  const std::size_t count = std::min<std::size_t>(params.size(), 6);
  append_u32(out, static_cast<std::uint32_t>(kUseStrategyReplyFixedBytes + count * kStrategyNameWireBytes));
  append_u32(out, index);
  append_u32(out, static_cast<std::uint32_t>(count));
  for (std::size_t k = 0; k < count; ++k) {
    std::byte name[kStrategyNameWireBytes] = {};
    std::memcpy(name, params[k].data(), std::min(params[k].size(), kStrategyNameWireBytes - 1));
    append_bytes(out, name);
  }
}

Expected<void> append_use_strategy_request(std::string_view name, std::vector<std::byte>& out) {
  if (name.empty() || name.size() >= kStrategyNameWireBytes)
    return fail(ErrorCode::invalid_argument, "a strategy name is 1 to {} bytes; '{}' is {}", kStrategyNameWireBytes - 1,
                name, name.size());
  std::byte combo[kComboWireBytes] = {};
  std::memcpy(combo, name.data(), name.size());
  append_u32(out, static_cast<std::uint32_t>(kBodyHeaderBytes + kComboWireBytes));
  out.push_back(static_cast<std::byte>(SocketOpcode::use_strategy));
  append_u32(out, 0);
  append_u32(out, 1);
  append_bytes(out, combo);
  return {};
}

void append_echo_params_reply(std::span<const std::byte> params, std::vector<std::byte>& out) {
  append_u32(out, static_cast<std::uint32_t>(params.size()));
  append_bytes(out, params);
}

void append_preloaded_reply(std::uint64_t checksum, double fee, std::uint64_t n_bars, std::string_view name,
                            std::vector<std::byte>& out) {
  const std::string_view text = utf8_prefix(name, kMaxSeriesNameBytes);
  const std::size_t at = out.size();
  out.resize(at + kLengthPrefixBytes + kPreloadedReplyFixedBytes);
  std::byte* base = out.data() + at;
  store_le(base, static_cast<std::uint32_t>(kPreloadedReplyFixedBytes + text.size()));
  store_le(base + 4, checksum);
  store_le(base + 12, fee);
  store_le(base + 20, n_bars);
  store_le(base + 28, static_cast<std::uint32_t>(text.size()));
  append_bytes(out, std::as_bytes(std::span(text.data(), text.size())));
}

void append_error_reply(SocketError error, std::string_view message, std::vector<std::byte>& out) {
  const std::string_view text = utf8_prefix(message, kMaxErrorMessageBytes);
  out.reserve(out.size() + kErrorReplyHeaderBytes + text.size());
  append_u32(out, kErrorReplyMarker);
  append_u32(out, static_cast<std::uint32_t>(error));
  append_u32(out, static_cast<std::uint32_t>(text.size()));
  append_bytes(out, std::as_bytes(std::span(text.data(), text.size())));
}

ReplyScan scan_reply(std::span<const std::byte> buffered, std::uint32_t max_body) noexcept {
  ReplyScan scan;
  if (buffered.size() < kLengthPrefixBytes) return scan;
  const auto first = load_le<std::uint32_t>(buffered.data());
  if (first != kErrorReplyMarker) {
    scan.body_len = first;
    if (first > max_body) {
      scan.state = ScanState::too_large;
      return scan;
    }
    scan.frame_bytes = kLengthPrefixBytes + first;
    if (buffered.size() >= scan.frame_bytes) scan.state = ScanState::complete;
    return scan;
  }
  scan.is_error = true;
  if (buffered.size() < kErrorReplyHeaderBytes) return scan;
  scan.error_code = load_le<std::uint32_t>(buffered.data() + 4);
  scan.message_len = load_le<std::uint32_t>(buffered.data() + 8);
  if (scan.message_len > kMaxErrorMessageBytes) {
    scan.state = ScanState::too_large;
    return scan;
  }
  scan.frame_bytes = kErrorReplyHeaderBytes + scan.message_len;
  if (buffered.size() >= scan.frame_bytes) scan.state = ScanState::complete;
  return scan;
}

bool decode_sweep_reply(std::span<const std::byte> body, std::span<BacktestResult> out) noexcept {
  const std::size_t n = out.size();
  if (body.size() != 16 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    out[i].pnl = load_le<double>(body.data() + 8 * i);
    out[i].trades = load_le<std::int64_t>(body.data() + 8 * n + 8 * i);
  }
  return true;
}

std::optional<LoadReply> decode_load_reply(std::span<const std::byte> body) noexcept {
  if (body.size() != kLoadReplyBodyBytes) return std::nullopt;
  return LoadReply{load_le<std::uint64_t>(body.data()), load_le<double>(body.data() + 8)};
}

std::optional<UseStrategyReply> decode_use_strategy_reply(std::span<const std::byte> body) noexcept {
  if (body.size() < kUseStrategyReplyFixedBytes) return std::nullopt;
  UseStrategyReply reply;
  reply.index = load_le<std::uint32_t>(body.data());
  reply.param_count = load_le<std::uint32_t>(body.data() + 4);
  if (reply.param_count < 1 || reply.param_count > 6 ||
      body.size() != kUseStrategyReplyFixedBytes + reply.param_count * kStrategyNameWireBytes)
    return std::nullopt;
  for (std::uint32_t k = 0; k < reply.param_count; ++k) {
    const auto* text = reinterpret_cast<const char*>(body.data() + kUseStrategyReplyFixedBytes + k * kStrategyNameWireBytes);
    const std::string_view field(text, kStrategyNameWireBytes);
    const std::size_t end = field.find('\0');
    if (end == std::string_view::npos) return std::nullopt;
    reply.params[k] = field.substr(0, end);
  }
  return reply;
}

std::optional<PreloadedReply> decode_preloaded_reply(std::span<const std::byte> body) noexcept {
  if (body.size() < kPreloadedReplyFixedBytes) return std::nullopt;
  const auto name_len = load_le<std::uint32_t>(body.data() + 24);
  if (name_len > kMaxSeriesNameBytes || body.size() != kPreloadedReplyFixedBytes + name_len) return std::nullopt;
  PreloadedReply reply;
  reply.checksum = load_le<std::uint64_t>(body.data());
  reply.fee = load_le<double>(body.data() + 8);
  reply.n_bars = load_le<std::uint64_t>(body.data() + 16);
  reply.name = std::string_view(reinterpret_cast<const char*>(body.data()) + kPreloadedReplyFixedBytes, name_len);
  return reply;
}

std::optional<std::string_view> error_reply_message(std::span<const std::byte> frame) noexcept {
  const ReplyScan scan = scan_reply(frame, 0);
  if (!scan.is_error || scan.state != ScanState::complete) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(frame.data()) + kErrorReplyHeaderBytes, scan.message_len);
}

}  // namespace ipcfloor
