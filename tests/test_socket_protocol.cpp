// The socket frame codec (socket/socket_protocol.hpp): exact byte layouts, round trips of every
// opcode and reply, and one named rejection for every way a frame can be malformed.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "socket/socket_protocol.hpp"

using namespace ipcfloor;

namespace {

std::vector<std::byte> bytes_of(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (const int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

// A body built by hand: [opcode][n_bars][n_combos] then `tail` raw bytes.
std::vector<std::byte> body(std::uint8_t opcode, std::uint32_t n_bars, std::uint32_t n_combos, std::size_t tail_bytes = 0) {
  std::vector<std::byte> out(kBodyHeaderBytes + tail_bytes);
  out[0] = static_cast<std::byte>(opcode);
  store_le(out.data() + 1, n_bars);
  store_le(out.data() + 5, n_combos);
  return out;
}

// A well-formed body for `opcode` (the frame minus its length prefix).
std::vector<std::byte> good_body(SocketOpcode opcode, const std::vector<double>& close, const std::vector<Combo>& combos) {
  std::vector<std::byte> frame;
  REQUIRE(append_request(opcode, close, combos, frame).has_value());
  return {frame.begin() + kLengthPrefixBytes, frame.end()};
}

const std::vector<double> kClose = {100.0, 101.5, 99.25, 102.0, 103.0, 101.0, 100.5, 104.0};

SocketFault decode_fault(std::span<const std::byte> b) {
  const auto decoded = decode_request(b);
  REQUIRE_FALSE(decoded.has_value());
  return decoded.error();
}

}  // namespace

TEST_CASE("a sweep request is laid out exactly as the study's protocol, little-endian") {
  const std::vector<double> close = {1.5, 2.0};
  const std::vector<Combo> combos = {Combo{1, 2, 1, 1, 1, 1}};
  std::vector<std::byte> frame;
  REQUIRE(append_request(SocketOpcode::sweep, close, combos, frame).has_value());
  REQUIRE(frame.size() == 4 + 9 + 16 + 48);
  CHECK(load_le<std::uint32_t>(frame.data()) == 9 + 16 + 48);
  CHECK(frame[4] == std::byte{0});
  CHECK(load_le<std::uint32_t>(frame.data() + 5) == 2);
  CHECK(load_le<std::uint32_t>(frame.data() + 9) == 1);
  // 1.5 = 0x3FF8000000000000, low byte first.
  CHECK(frame[13] == std::byte{0});
  CHECK(frame[20] == std::byte{0x3F});
  CHECK(frame[19] == std::byte{0xF8});
  CHECK(load_le<double>(frame.data() + 21) == 2.0);
  CHECK(load_le<std::int64_t>(frame.data() + 29) == 1);
  CHECK(load_le<std::int64_t>(frame.data() + 37) == 2);
  CHECK(load_le<std::int64_t>(frame.data() + 29 + 40) == 1);
}

TEST_CASE("the echo_params request is the 61-byte frame append_request would build") {
  const Combo combo{3, 6, 2, 1, 2, 3};
  std::array<std::byte, kEchoParamsRequestBytes> fixed{};
  encode_echo_params_request(combo, fixed);
  std::vector<std::byte> built;
  REQUIRE(append_request(SocketOpcode::echo_params, {}, std::vector<Combo>{combo}, built).has_value());
  REQUIRE(built.size() == fixed.size());
  CHECK(std::memcmp(built.data(), fixed.data(), fixed.size()) == 0);
  CHECK(fixed[0] == std::byte{57});  // body_len = 9 + 48
  CHECK(fixed[4] == std::byte{4});
}

TEST_CASE("scan_request waits for whole frames and refuses an oversized length from its 4 bytes alone") {
  std::vector<std::byte> frame;
  REQUIRE(append_request(SocketOpcode::echo, kClose, {}, frame).has_value());
  for (std::size_t n = 0; n < frame.size(); ++n) {
    CAPTURE(n);
    const RequestScan scan = scan_request(std::span(frame.data(), n), kDefaultMaxFrameBytes);
    CHECK(scan.state == ScanState::need_more);
    if (n >= 4) CHECK(scan.body_len == frame.size() - 4);
  }
  const RequestScan whole = scan_request(frame, kDefaultMaxFrameBytes);
  CHECK(whole.state == ScanState::complete);
  CHECK(whole.frame_bytes == frame.size());

  // Trailing bytes (the next frame) do not change the first frame's scan.
  frame.push_back(std::byte{7});
  CHECK(scan_request(frame, kDefaultMaxFrameBytes).frame_bytes == frame.size() - 1);

  const auto huge = bytes_of({0xFF, 0xFF, 0xFF, 0x7F});
  const RequestScan too_large = scan_request(huge, kDefaultMaxFrameBytes);
  CHECK(too_large.state == ScanState::too_large);
  CHECK(too_large.body_len == 0x7FFFFFFFu);
  CHECK(scan_request(frame, static_cast<std::uint32_t>(frame.size() - 6)).state == ScanState::too_large);
  CHECK(scan_request(frame, static_cast<std::uint32_t>(frame.size() - 5)).state == ScanState::complete);
}

TEST_CASE("every opcode round-trips through append_request and decode_request") {
  const std::vector<Combo> combos = {combo_from_length(6), Combo{1, 8, 1, 1, 1, 1}};
  SUBCASE("sweep") {
    const auto b = good_body(SocketOpcode::sweep, kClose, combos);
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->opcode == SocketOpcode::sweep);
    CHECK(view->n_bars == kClose.size());
    CHECK(view->n_combos == 2);
    for (std::size_t i = 0; i < kClose.size(); ++i) CHECK(view->close_at(i) == kClose[i]);
    CHECK(view->combo_at(0) == combos[0]);
    CHECK(view->combo_at(1) == combos[1]);
    std::vector<double> aligned(kClose.size());
    copy_close(view->close, aligned);
    CHECK(aligned == kClose);
  }
  SUBCASE("echo carries any values, NaN included, and no combos") {
    const std::vector<double> odd = {std::nan(""), -1.0, 0.0};
    const auto b = good_body(SocketOpcode::echo, odd, {});
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->opcode == SocketOpcode::echo);
    CHECK(std::isnan(view->close_at(0)));
    CHECK(view->close_at(1) == -1.0);
  }
  SUBCASE("echo of nothing") {
    const auto b = good_body(SocketOpcode::echo, {}, {});
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->close.empty());
  }
  SUBCASE("load") {
    const auto b = good_body(SocketOpcode::load, kClose, {});
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->opcode == SocketOpcode::load);
    CHECK(view->close.size() == 8 * kClose.size());
  }
  SUBCASE("sweep_loaded carries no bars, and its windows are not checked against anything yet") {
    const std::vector<Combo> wide = {Combo{3, 500000, 2, 1, 2, 3}};
    const auto b = good_body(SocketOpcode::sweep_loaded, {}, wide);  // the view points into b
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->combo_at(0) == wide[0]);
  }
  SUBCASE("echo_params") {
    const auto b = good_body(SocketOpcode::echo_params, {}, {combos[0]});
    const auto view = decode_request(b);
    REQUIRE(view.has_value());
    CHECK(view->params.size() == 48);
    CHECK(view->combo_at(0) == combos[0]);
  }
}

TEST_CASE("a body shorter than the 9-byte header is a length mismatch, at every length") {
  for (std::size_t n = 0; n < kBodyHeaderBytes; ++n) {
    CAPTURE(n);
    std::vector<std::byte> b(n, std::byte{0});
    const SocketFault fault = decode_fault(b);
    CHECK(fault.error == SocketError::length_mismatch);
    CHECK(describe(fault).find("shorter than the 9-byte header") != std::string::npos);
  }
}

TEST_CASE("an unknown opcode is named") {
  for (const int opcode : {7, 8, 127, 255}) {
    const SocketFault fault = decode_fault(body(static_cast<std::uint8_t>(opcode), 0, 0));
    CHECK(fault.error == SocketError::unknown_opcode);
    CHECK(describe(fault).find("opcode " + std::to_string(opcode) + " is unknown") != std::string::npos);
  }
}

TEST_CASE("n_bars or n_combos that disagree with body_len are a length mismatch naming both") {
  auto b = good_body(SocketOpcode::sweep, kClose, {combo_from_length(6)});
  SUBCASE("one byte short") {
    b.pop_back();
    const SocketFault fault = decode_fault(b);
    CHECK(fault.error == SocketError::length_mismatch);
    CHECK(fault.expected == b.size() + 1);
    CHECK(fault.actual == b.size());
    const std::string text = describe(fault);
    CHECK(text.find("n_bars 8 and n_combos 1") != std::string::npos);
    CHECK(text.find("but body_len is") != std::string::npos);
  }
  SUBCASE("one byte long") {
    b.push_back(std::byte{0});
    CHECK(decode_fault(b).error == SocketError::length_mismatch);
  }
  SUBCASE("n_bars off by one") {
    store_le(b.data() + 1, std::uint32_t{9});
    CHECK(decode_fault(b).error == SocketError::length_mismatch);
  }
  SUBCASE("n_combos off by one") {
    store_le(b.data() + 5, std::uint32_t{2});
    CHECK(decode_fault(b).error == SocketError::length_mismatch);
  }
  SUBCASE("counts at their maximum do not overflow the size check") {
    store_le(b.data() + 1, std::uint32_t{0xFFFFFFFF});
    store_le(b.data() + 5, std::uint32_t{0xFFFFFFFF});
    const SocketFault fault = decode_fault(b);
    CHECK(fault.error == SocketError::length_mismatch);
    CHECK(fault.expected == 9 + 8ull * 0xFFFFFFFFull + 48ull * 0xFFFFFFFFull);
  }
}

TEST_CASE("counts an opcode fixes are checked: bad_shape names the opcode and the counts") {
  const auto check_shape = [](std::vector<std::byte> b, const char* words) {
    const SocketFault fault = decode_fault(b);
    CHECK(fault.error == SocketError::bad_shape);
    CHECK(describe(fault).find(words) != std::string::npos);
  };
  check_shape(good_body(SocketOpcode::sweep, {100.0}, {Combo{1, 1, 1, 1, 1, 1}}), "sweep (opcode 0) needs n_bars >= 2");
  check_shape(good_body(SocketOpcode::sweep, {}, {}), "got n_bars 0");
  check_shape(good_body(SocketOpcode::load, kClose, {combo_from_length(6)}), "load (opcode 2) needs");
  check_shape(good_body(SocketOpcode::load, {100.0}, {}), "got n_bars 1, n_combos 0");
  check_shape(good_body(SocketOpcode::sweep_loaded, kClose, {combo_from_length(6)}), "n_bars must be 0, got 8");
  check_shape(good_body(SocketOpcode::echo_params, {}, {}), "echo_params (opcode 4) needs n_bars 0 and n_combos 1");
  check_shape(good_body(SocketOpcode::echo_params, {}, {combo_from_length(6), combo_from_length(8)}), "n_combos 2");
  check_shape(good_body(SocketOpcode::echo_params, {1.0}, {combo_from_length(6)}), "got n_bars 1");
  check_shape(good_body(SocketOpcode::use_preloaded, kClose, {}), "use_preloaded (opcode 5) carries nothing");
  check_shape(good_body(SocketOpcode::use_preloaded, {}, {combo_from_length(6)}), "got n_bars 0, n_combos 1");
}

TEST_CASE("a NaN, infinite, zero or negative close in sweep or load is a bad price naming the bar") {
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                           0.0, -0.0, -5.0, std::numeric_limits<double>::denorm_min() * -1.0}) {
    for (const SocketOpcode opcode : {SocketOpcode::sweep, SocketOpcode::load}) {
      CAPTURE(bad);
      std::vector<double> close = kClose;
      close[5] = bad;
      const SocketFault fault =
          decode_fault(good_body(opcode, close, opcode == SocketOpcode::sweep ? std::vector<Combo>{Combo{1, 2, 1, 1, 1, 1}}
                                                                              : std::vector<Combo>{}));
      CHECK(fault.error == SocketError::bad_price);
      CHECK(fault.index == 5);
      CHECK(describe(fault).find("bar 5: close") != std::string::npos);
    }
  }
  // The smallest positive double is a price (tiny, but finite and > 0).
  std::vector<double> close = kClose;
  close[0] = std::numeric_limits<double>::denorm_min();
  CHECK(decode_request(good_body(SocketOpcode::load, close, {})).has_value());
}

TEST_CASE("the codec leaves a combo's windows to its strategy: any six values decode") {
  // Whether a combo may run is the server's strategy's verdict (socket_server admits it), not the
  // codec's: the codec checks the frame's shape and prices only.
  for (const std::int64_t value : {std::int64_t{0}, std::int64_t{-1}, std::numeric_limits<std::int64_t>::min(),
                                   std::numeric_limits<std::int64_t>::max()}) {
    CAPTURE(value);
    const std::vector<Combo> combos = {Combo{1, 2, 1, 1, 1, value}};
    const auto body = good_body(SocketOpcode::sweep, kClose, combos);
    const auto view = decode_request(body);
    REQUIRE(view.has_value());
    CHECK(view->combo_at(0) == combos[0]);
  }
}

TEST_CASE("use_strategy carries a name of up to 31 bytes and its reply the index and parameter names") {
  std::vector<std::byte> frame;
  REQUIRE(append_use_strategy_request("sma_cross", frame).has_value());
  const auto view = decode_request(std::span(frame).subspan(kLengthPrefixBytes));
  REQUIRE(view.has_value());
  CHECK(view->opcode == SocketOpcode::use_strategy);
  CHECK(strategy_name_of(*view) == "sma_cross");
  std::vector<std::byte> too_long;
  CHECK_FALSE(append_use_strategy_request(std::string(32, 'a'), too_long).has_value());
  CHECK_FALSE(append_use_strategy_request("", too_long).has_value());

  std::vector<std::byte> reply;
  const std::string_view names[] = {"fast", "slow"};
  append_use_strategy_reply(3, names, reply);
  const auto decoded = decode_use_strategy_reply(std::span(reply).subspan(kLengthPrefixBytes));
  REQUIRE(decoded.has_value());
  CHECK(decoded->index == 3);
  CHECK(decoded->param_count == 2);
  CHECK(decoded->params[0] == "fast");
  CHECK(decoded->params[1] == "slow");
  CHECK_FALSE(decode_use_strategy_reply(std::span(reply).subspan(kLengthPrefixBytes, 9)).has_value());
}

TEST_CASE("replies round-trip and a client can always tell an error reply from a success") {
  SUBCASE("sweep: pnl array, then trades array") {
    const std::vector<BacktestResult> results = {{-5165.577039790348, 57029}, {1.25, 3}};
    std::vector<std::byte> frame;
    append_sweep_reply(results, frame);
    REQUIRE(frame.size() == 4 + 32);
    CHECK(load_le<std::uint32_t>(frame.data()) == 32);
    CHECK(load_le<double>(frame.data() + 4) == -5165.577039790348);
    CHECK(load_le<double>(frame.data() + 12) == 1.25);
    CHECK(load_le<std::int64_t>(frame.data() + 20) == 57029);
    CHECK(load_le<std::int64_t>(frame.data() + 28) == 3);
    const ReplyScan scan = scan_reply(frame, kDefaultMaxFrameBytes);
    REQUIRE(scan.state == ScanState::complete);
    CHECK_FALSE(scan.is_error);
    std::vector<BacktestResult> back(2);
    CHECK(decode_sweep_reply(std::span(frame).subspan(4), back));
    CHECK(back == results);
    std::vector<BacktestResult> wrong(3);
    CHECK_FALSE(decode_sweep_reply(std::span(frame).subspan(4), wrong));
  }
  SUBCASE("echo, load and echo_params") {
    std::vector<std::byte> frame;
    const auto close_bytes = std::as_bytes(std::span(kClose));
    append_echo_reply(close_bytes, frame);
    CHECK(frame.size() == 4 + close_bytes.size());
    CHECK(std::memcmp(frame.data() + 4, close_bytes.data(), close_bytes.size()) == 0);
    frame.clear();
    append_load_reply(0x0123456789abcdefull, 0.09, frame);
    const ReplyScan scan = scan_reply(frame, kDefaultMaxFrameBytes);
    REQUIRE(scan.state == ScanState::complete);
    const auto load = decode_load_reply(std::span(frame).subspan(4));
    REQUIRE(load.has_value());
    CHECK(load->checksum == 0x0123456789abcdefull);
    CHECK(load->fee == 0.09);
    CHECK_FALSE(decode_load_reply(std::span(frame).subspan(5)).has_value());
    frame.clear();
    const Combo combo{-1, 2, -3, 4, -5, 6};
    append_echo_params_reply(std::as_bytes(std::span(&combo, 1)), frame);
    CHECK(frame.size() == kEchoParamsReplyBytes);
  }
  SUBCASE("error reply") {
    std::vector<std::byte> frame;
    append_error_reply(SocketError::bad_price, "bar 7: close nan is not a finite positive price", frame);
    CHECK(load_le<std::uint32_t>(frame.data()) == kErrorReplyMarker);
    CHECK(load_le<std::uint32_t>(frame.data() + 4) == 5);
    for (std::size_t n = 0; n < frame.size(); ++n) {
      CAPTURE(n);
      const ReplyScan partial = scan_reply(std::span(frame.data(), n), kDefaultMaxFrameBytes);
      CHECK(partial.state == ScanState::need_more);
      if (n >= 4) CHECK(partial.is_error);
    }
    const ReplyScan scan = scan_reply(frame, kDefaultMaxFrameBytes);
    REQUIRE(scan.state == ScanState::complete);
    CHECK(scan.is_error);
    CHECK(scan.error_code == 5);
    CHECK(scan.frame_bytes == frame.size());
    const auto message = error_reply_message(frame);
    REQUIRE(message.has_value());
    CHECK(*message == "bar 7: close nan is not a finite positive price");
  }
  SUBCASE("a long message is cut at 1024 bytes, never inside a UTF-8 character") {
    std::string text(1023, 'x');
    for (int i = 0; i < 10; ++i) text += "\xc3\xa9";  // é: two bytes; the 1024-byte cut splits the first
    std::vector<std::byte> frame;
    append_error_reply(SocketError::internal, text, frame);
    const auto message = error_reply_message(frame);
    REQUIRE(message.has_value());
    CHECK(message->size() == 1023);
    std::string exact(1024, 'y');
    frame.clear();
    append_error_reply(SocketError::internal, exact + "tail", frame);
    CHECK(error_reply_message(frame)->size() == 1024);
  }
  SUBCASE("scan_reply refuses oversized replies and oversized error messages") {
    auto big = bytes_of({0x00, 0x00, 0x00, 0x10});
    CHECK(scan_reply(big, 1024).state == ScanState::too_large);
    auto bad_error = bytes_of({0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 0, 0x01, 0x04, 0, 0});  // msg_len 1025
    CHECK(scan_reply(bad_error, kDefaultMaxFrameBytes).state == ScanState::too_large);
    CHECK_FALSE(error_reply_message(bad_error).has_value());
    CHECK_FALSE(error_reply_message(bytes_of({4, 0, 0, 0, 1, 2, 3, 4})).has_value());
  }
}

TEST_CASE("use_preloaded: a 13-byte request, and a reply that carries the series' checksum, fee, bars and name") {
  std::vector<std::byte> request;
  REQUIRE(append_request(SocketOpcode::use_preloaded, {}, {}, request).has_value());
  REQUIRE(request.size() == 13);
  CHECK(load_le<std::uint32_t>(request.data()) == 9);
  CHECK(request[4] == std::byte{5});
  const auto view = decode_request(std::span(request).subspan(4));
  REQUIRE(view.has_value());
  CHECK(view->opcode == SocketOpcode::use_preloaded);

  std::vector<std::byte> frame;
  append_preloaded_reply(0x0123456789abcdefULL, 0.09, 150000, "gbm(bars=150000, seed=42)", frame);
  REQUIRE(frame.size() == 4 + kPreloadedReplyFixedBytes + 25);
  CHECK(load_le<std::uint32_t>(frame.data()) == kPreloadedReplyFixedBytes + 25);
  CHECK(load_le<std::uint64_t>(frame.data() + 4) == 0x0123456789abcdefULL);
  CHECK(load_le<double>(frame.data() + 12) == 0.09);
  CHECK(load_le<std::uint64_t>(frame.data() + 20) == 150000);
  CHECK(load_le<std::uint32_t>(frame.data() + 28) == 25);
  const auto reply = decode_preloaded_reply(std::span(frame).subspan(4));
  REQUIRE(reply.has_value());
  CHECK(reply->checksum == 0x0123456789abcdefULL);
  CHECK(reply->fee == 0.09);
  CHECK(reply->n_bars == 150000);
  CHECK(reply->name == "gbm(bars=150000, seed=42)");
  // A name_len that disagrees with the body, or a body cut short, is no reply at all.
  CHECK_FALSE(decode_preloaded_reply(std::span(frame).subspan(4, frame.size() - 5)).has_value());
  CHECK_FALSE(decode_preloaded_reply(std::span(frame).subspan(4, 20)).has_value());
  // Names are cut at kMaxSeriesNameBytes, never inside a UTF-8 character.
  std::string long_name(kMaxSeriesNameBytes - 1, 'x');
  long_name += "\xc3\xa9tail";
  std::vector<std::byte> cut;
  append_preloaded_reply(1, 0.0, 2, long_name, cut);
  const auto cut_reply = decode_preloaded_reply(std::span(cut).subspan(4));
  REQUIRE(cut_reply.has_value());
  CHECK(cut_reply->name == std::string(kMaxSeriesNameBytes - 1, 'x'));
}

TEST_CASE("append_request refuses frames over the limit instead of building them") {
  std::vector<std::byte> frame;
  const std::vector<double> close(100, 1.0);
  const auto refused = append_request(SocketOpcode::echo, close, {}, frame, 100);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message.find("809 body bytes, over the frame limit of 100") != std::string::npos);
  CHECK(frame.empty());
}

TEST_CASE("names, and which errors close the connection") {
  CHECK(to_string(SocketOpcode::sweep_loaded) == "sweep_loaded");
  CHECK(to_string(static_cast<SocketOpcode>(9)) == "unknown");
  CHECK(to_string(SocketError::no_series_loaded) == "no_series_loaded");
  CHECK(to_string(static_cast<SocketError>(0)) == "unknown");
  for (std::uint32_t code = 1; code < kSocketErrorSlots; ++code) {
    const auto error = static_cast<SocketError>(code);
    CAPTURE(to_string(error));
    const bool fatal = error == SocketError::frame_too_large || error == SocketError::truncated ||
                       error == SocketError::stalled || error == SocketError::permission_denied ||
                       error == SocketError::too_many_connections || error == SocketError::idle_timeout;
    CHECK(closes_connection(error) == fatal);
    CHECK(to_string(error) != "unknown");
    SocketFault fault;
    fault.error = error;
    CHECK_FALSE(describe(fault).empty());
  }
  SocketFault none;
  none.error = SocketError::no_series_loaded;
  CHECK(describe(none).find("send load (opcode 2) or use_preloaded (opcode 5) on this connection first") !=
        std::string::npos);
  CHECK(to_string(SocketOpcode::use_preloaded) == "use_preloaded");
  SocketFault no_preloaded;
  no_preloaded.error = SocketError::no_preloaded_series;
  CHECK(describe(no_preloaded).find("holds no series of its own") != std::string::npos);
}

TEST_CASE("over_memory_cap says what asked for the memory, and too_many_connections whether it closed an idle "
          "connection") {
  SocketFault memory;
  memory.error = SocketError::over_memory_cap;
  memory.actual = 800'013;
  memory.limit = 800'013;
  memory.expected = 1'048'576;
  memory.field = kMemoryForFrame;
  CHECK(describe(memory).find("a frame of 800013 bytes would take the memory this server holds for its connections "
                              "(series, frames, replies) to 1600026 bytes, past its cap of 1048576 bytes") !=
        std::string::npos);
  memory.field = kMemoryForRequest;
  CHECK(describe(memory).find("this request needs 800013 bytes (its frame, reply and scratch)") != std::string::npos);
  memory.field = kMemoryForSeries;
  CHECK(describe(memory).find("loading 800013 bytes") != std::string::npos);
  SocketFault busy;
  busy.error = SocketError::too_many_connections;
  busy.expected = 2;
  CHECK(describe(busy).find("maximum of 2 connections, none of them idle") != std::string::npos);
  busy.field = kClosedForNewcomer;
  busy.limit = 1500;
  CHECK(describe(busy).find("closed as the longest-idle connection (1500 ms without a request) to admit a new peer") !=
        std::string::npos);
}

TEST_CASE("arbitrary bytes never crash the decoder, and every accepted frame is self-consistent") {
  std::mt19937_64 rng(20240611);
  const auto valid = good_body(SocketOpcode::sweep, kClose, {Combo{1, 2, 1, 1, 1, 1}});
  std::vector<std::byte> b;
  for (int round = 0; round < 200'000; ++round) {
    if (round % 2 == 0) {
      b.assign(rng() % 200, std::byte{0});
      for (auto& x : b) x = static_cast<std::byte>(rng());
      if (b.size() >= 9 && rng() % 2 == 0) b[0] = static_cast<std::byte>(rng() % 6);
    } else {  // one mutated byte of a valid body, often inside the header
      b = valid;
      b[rng() % (rng() % 2 == 0 ? 9 : b.size())] = static_cast<std::byte>(rng());
    }
    const auto decoded = decode_request(b);
    if (!decoded) {
      CHECK_FALSE(describe(decoded.error()).empty());
      continue;
    }
    const RequestView& view = *decoded;
    REQUIRE(kBodyHeaderBytes + view.close.size() + view.params.size() == b.size());
    REQUIRE(view.close.size() == 8 * std::size_t{view.n_bars});
    REQUIRE(view.params.size() == 48 * std::size_t{view.n_combos});
  }
}
