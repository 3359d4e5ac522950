// fuzz-sources: socket/socket_protocol.cpp
// fuzz-libs: -lfmt
//
// libFuzzer harness for the socket frame codec (socket/socket_protocol.hpp, docs/SPEC.md §4, §8): the
// input is what a hostile peer can send a server, or a hostile server can send a client.
// The first byte picks a mode:
//   0  a byte stream arriving in chunks of input-chosen sizes, framed and decoded exactly as
//      the server does (scan_request on the buffered bytes, decode_request on each whole body),
//      with the server's replies built and re-parsed the way a client parses them;
//   1  one structurally plausible request (opcode, counts, closes and windows taken from the
//      input, the body length sometimes off by a little), so deep validation paths are reached;
//   2  the bytes as a reply stream, parsed as the client does (scan_reply, decode_*).
//
// Build and run every harness with tools/fuzz (see docs/PROTOCOL.md); by hand, from the root:
//   clang++-19 -std=c++23 -O1 -g -I. -fsanitize=fuzzer,address,undefined \
//     tests/fuzz/fuzz_socket_frame.cpp socket/socket_protocol.cpp -lfmt -o fuzz_socket_frame
//
// Invariants (a violation traps, which libFuzzer records as a crash; ASan and UBSan add
// out-of-bounds reads and undefined behaviour):
//   - scan_request never reports a frame larger than the buffer, nor one over the limit;
//   - a decoded request's views lie inside its body and add up to it exactly; the counts the
//     opcode fixes hold; sweep and load closes are finite and > 0; sweep windows are in
//     [1, n_bars];
//   - every rejection has a sentence, and its error reply parses back to the same code and a
//     message of at most 1024 bytes;
//   - every reply the server would send parses as complete and as exactly one frame.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "socket/socket_protocol.hpp"

namespace {

using namespace ipcfloor;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

// The reply must parse back as one complete frame of exactly its size.
void check_reply(const std::vector<std::byte>& reply, bool is_error) {
  const ReplyScan scan = scan_reply(reply, kMaxMaxFrameBytes);
  require(scan.state == ScanState::complete);
  require(scan.frame_bytes == reply.size());
  require(scan.is_error == is_error);
}

void check_rejection(const SocketFault& fault) {
  const std::string sentence = describe(fault);
  require(!sentence.empty());
  std::vector<std::byte> reply;
  append_error_reply(fault.error, sentence, reply);
  check_reply(reply, true);
  const auto message = error_reply_message(reply);
  require(message.has_value());
  require(message->size() <= kMaxErrorMessageBytes);
  require(sentence.compare(0, message->size(), *message) == 0);
  require(load_le<std::uint32_t>(reply.data() + 4) == static_cast<std::uint32_t>(fault.error));
}

// What the server does with one whole body; returns the decoded view's consistency.
void serve_body(std::span<const std::byte> body, std::uint64_t loaded_bars) {
  const auto decoded = decode_request(body);
  if (!decoded) {
    check_rejection(decoded.error());
    return;
  }
  const RequestView& view = *decoded;
  require(kBodyHeaderBytes + view.close.size() + view.params.size() == body.size());
  require(view.close.size() == 8 * std::size_t{view.n_bars});
  require(view.params.size() == kComboWireBytes * std::size_t{view.n_combos});
  require(view.close.empty() || (view.close.data() >= body.data() && view.close.data() + view.close.size() <= body.data() + body.size()));
  require(view.params.empty() || (view.params.data() >= body.data() && view.params.data() + view.params.size() <= body.data() + body.size()));
  std::vector<std::byte> reply;
  switch (view.opcode) {
    case SocketOpcode::sweep: {
      require(view.n_bars >= 2);
      for (std::size_t i = 0; i < view.n_bars; ++i) {
        const double price = view.close_at(i);
        require(std::isfinite(price) && price > 0.0);
      }
      // Its combos' windows are the strategy's to judge (the server admits them), not the codec's.
      std::vector<double> aligned(view.n_bars);
      copy_close(view.close, aligned);
      for (std::size_t i = 0; i < view.n_bars; ++i) require(std::memcmp(&aligned[i], view.close.data() + 8 * i, 8) == 0);
      std::vector<BacktestResult> results(view.n_combos, BacktestResult{1.5, 2});
      append_sweep_reply(results, reply);
      check_reply(reply, false);
      std::vector<BacktestResult> back(view.n_combos);
      require(decode_sweep_reply(std::span(reply).subspan(kLengthPrefixBytes), back));
      require(back == results);
      break;
    }
    case SocketOpcode::echo:
      append_echo_reply(view.close, reply);
      check_reply(reply, false);
      break;
    case SocketOpcode::load:
      require(view.n_bars >= 2 && view.n_combos == 0);
      require(!check_prices(view.close).has_value());
      append_load_reply(0x1234, 0.09, reply);
      check_reply(reply, false);
      require(decode_load_reply(std::span(reply).subspan(kLengthPrefixBytes)).has_value());
      break;
    case SocketOpcode::sweep_loaded:
      // Its windows are the strategy's to judge (the server admits them), not the codec's.
      require(view.n_bars == 0);
      break;
    case SocketOpcode::use_strategy: {
      require(view.n_bars == 0 && view.n_combos == 1);
      // Any 48 bytes: a name is found (NUL within 32 bytes) or not, never read past the combo.
      if (const auto name = strategy_name_of(view)) require(name->size() < kStrategyNameWireBytes);
      const std::string_view names[] = {"a", "bb"};
      append_use_strategy_reply(1, names, reply);
      check_reply(reply, false);
      require(decode_use_strategy_reply(std::span(reply).subspan(kLengthPrefixBytes)).has_value());
      break;
    }
    case SocketOpcode::echo_params:
      require(view.n_bars == 0 && view.n_combos == 1);
      append_echo_params_reply(view.params, reply);
      check_reply(reply, false);
      require(reply.size() == kEchoParamsReplyBytes);
      break;
    case SocketOpcode::use_preloaded: {
      require(view.n_bars == 0 && view.n_combos == 0);
      // The name is the server's, not the peer's, but its cut must hold for any text.
      const std::string name(reinterpret_cast<const char*>(body.data()), body.size());
      append_preloaded_reply(0x1234, 0.09, loaded_bars, name, reply);
      check_reply(reply, false);
      const auto decoded = decode_preloaded_reply(std::span(reply).subspan(kLengthPrefixBytes));
      require(decoded.has_value() && decoded->n_bars == loaded_bars && decoded->name.size() <= kMaxSeriesNameBytes);
      require(name.compare(0, decoded->name.size(), decoded->name) == 0);
      break;
    }
  }
}

void fuzz_stream(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return;
  // A small limit lets the fuzzer reach too_large; the default lets it reach everything else.
  const std::uint32_t max_body = (data[0] & 1) != 0 ? 512 : kDefaultMaxFrameBytes;
  const std::uint64_t loaded_bars = data[1];
  data += 2;
  size -= 2;
  std::vector<std::byte> buffer;
  std::size_t at = 0;
  while (at < size) {
    // Each chunk's length comes from the stream itself: a peer decides how bytes arrive.
    const std::size_t chunk = std::min<std::size_t>(size - at, 1 + data[at] % 97);
    const auto* from = reinterpret_cast<const std::byte*>(data + at);
    buffer.insert(buffer.end(), from, from + chunk);
    at += chunk;
    for (;;) {
      const RequestScan scan = scan_request(buffer, max_body);
      if (scan.state == ScanState::need_more) {
        if (buffer.size() >= kLengthPrefixBytes) require(scan.body_len <= max_body);
        break;
      }
      if (scan.state == ScanState::too_large) {
        require(scan.body_len > max_body);
        SocketFault fault;
        fault.error = SocketError::frame_too_large;
        fault.actual = scan.body_len;
        fault.expected = max_body;
        check_rejection(fault);
        return;  // the server closes the connection here
      }
      require(scan.frame_bytes == kLengthPrefixBytes + scan.body_len && scan.frame_bytes <= buffer.size());
      serve_body(std::span<const std::byte>(buffer).subspan(kLengthPrefixBytes, scan.body_len), loaded_bars);
      buffer.erase(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(scan.frame_bytes));
    }
  }
}

void fuzz_structured(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return;
  const std::uint8_t opcode = data[0] % 8;  // 6 and 7 are unknown
  const std::uint32_t n_bars = data[1] % 40;
  const std::uint32_t n_combos = data[2] % 6;
  const int slack = static_cast<int>(data[3] % 5) - 2;  // -2..2: body_len mismatches sometimes
  const std::uint64_t loaded_bars = 1 + data[4] % 40;     // the connection's series, for opcode 3
  data += 5;
  size -= 5;
  std::vector<std::byte> body(kBodyHeaderBytes + 8 * std::size_t{n_bars} + kComboWireBytes * n_combos);
  body[0] = static_cast<std::byte>(opcode);
  store_le(body.data() + 1, n_bars);
  store_le(body.data() + 5, n_combos);
  // Closes: mostly sensible prices, sometimes raw bits (NaN, inf, negative, zero).
  std::size_t at = 0;
  const auto next = [&]() -> std::uint8_t { return at < size ? data[at++] : 0; };
  for (std::uint32_t i = 0; i < n_bars; ++i) {
    const std::uint8_t kind = next();
    double price = 100.0 + kind;
    if (kind >= 250) {
      std::uint64_t bits = 0;
      for (int k = 0; k < 8; ++k) bits = (bits << 8) | next();
      std::memcpy(&price, &bits, sizeof price);
    }
    store_le(body.data() + kBodyHeaderBytes + 8 * i, price);
  }
  // Windows: mostly in [0, n_bars + 1], sometimes any int64.
  for (std::uint32_t c = 0; c < n_combos; ++c) {
    for (int k = 0; k < 6; ++k) {
      const std::uint8_t kind = next();
      std::int64_t window = kind % (n_bars + 2);
      if (kind >= 250) {
        std::uint64_t bits = 0;
        for (int b = 0; b < 8; ++b) bits = (bits << 8) | next();
        std::memcpy(&window, &bits, sizeof window);
      }
      store_le(body.data() + kBodyHeaderBytes + 8 * std::size_t{n_bars} + kComboWireBytes * c + 8 * k, window);
    }
  }
  if (slack < 0 && body.size() >= static_cast<std::size_t>(-slack)) body.resize(body.size() - static_cast<std::size_t>(-slack));
  if (slack > 0) body.resize(body.size() + static_cast<std::size_t>(slack), std::byte{0});
  serve_body(body, loaded_bars);
}

void fuzz_replies(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  std::span<const std::byte> rest(bytes, size);
  while (!rest.empty()) {
    const ReplyScan scan = scan_reply(rest, 4096);
    if (scan.state != ScanState::complete) return;
    require(scan.frame_bytes <= rest.size());
    const auto frame = rest.first(scan.frame_bytes);
    if (scan.is_error) {
      const auto message = error_reply_message(frame);
      require(message.has_value() && message->size() == scan.message_len);
    } else {
      const auto body = frame.subspan(kLengthPrefixBytes);
      std::vector<BacktestResult> results(body.size() / 16);
      require(decode_sweep_reply(body, results) == (body.size() % 16 == 0));
      require(decode_load_reply(body).has_value() == (body.size() == kLoadReplyBodyBytes));
      if (const auto preloaded = decode_preloaded_reply(body)) {
        require(body.size() == kPreloadedReplyFixedBytes + preloaded->name.size());
        require(preloaded->name.empty() ||
                (preloaded->name.data() >= reinterpret_cast<const char*>(body.data()) &&
                 preloaded->name.data() + preloaded->name.size() <= reinterpret_cast<const char*>(body.data()) + body.size()));
      }
      require(!error_reply_message(frame).has_value());
    }
    rest = rest.subspan(scan.frame_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0: fuzz_stream(data + 1, size - 1); break;
    case 1: fuzz_structured(data + 1, size - 1); break;
    default: fuzz_replies(data + 1, size - 1); break;
  }
  return 0;
}
