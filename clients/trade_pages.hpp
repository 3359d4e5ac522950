#pragma once
// One combo's trade list through an engine, a page at a time: each TRADES request runs the
// backtest again and sends the trades from its options' first_trade on, as many as the lane's
// bulk region holds (docs/PROTOCOL.md). The one loop every client that wants a trade list uses:
// the C ABI's ipcfloor_trades (and through it C++ and Python) and `ipcfloor trades --name`.
//
// Threads: the client's thread. Memory: allocates nothing itself; `page` decides what to keep.

#include <cstddef>
#include <cstdint>
#include <span>

#include "clients/shm_client.hpp"
#include "ipcfloor/strategy.h"
#include "shm/frames.hpp"

namespace ipcfloor {

// How fetching the pages ended.
enum class TradePagesEnd : std::uint8_t {
  ok,            // every page came; `answer` and `record` are the last page's (pnl, trades, figures)
  refused,       // the engine refused the combo: `answer` says why (its record too, where it has one)
  lane_failed,   // `lane` says how (ShmClient::describe)
  inconsistent,  // a page that does not fit the request (the lane's object was tampered with)
  no_room,       // the lane has no bulk region (serve --bulk-bytes 0)
};

struct TradePagesResult {
  TradePagesEnd end = TradePagesEnd::ok;
  CallStatus lane = CallStatus::ok;
  ResponseSlot answer{};
  AnswerRecord record{};
  std::uint64_t trades = 0;  // the combo's closed trades, as the engine counted them
};

// Fetches the pages of `params` on `flags` (series and strategy) with `options` (its range, fee,
// bars per year; first_trade is set here), calling page(first, trades) for each, in order, until
// page returns false or every trade came. Stops at the first page for which page() returns false.
template <class Page>
[[nodiscard]] TradePagesResult fetch_trade_pages(ShmClient& client, std::uint16_t flags, FramePayload params,
                                                 RequestOptions options, Page&& page) {
  TradePagesResult result;
  const std::span<std::byte> bulk = client.bulk();
  const std::size_t room = bulk.size() / sizeof(ipcfloor_trade);
  if (room == 0) {
    result.end = TradePagesEnd::no_room;
    return result;
  }
  std::uint64_t got = 0;
  for (;;) {
    options.present |= kOptionFirstTrade;
    options.first_trade = got;
    result.lane = client.call(Opcode::trades, flags, params, &options);
    if (result.lane != CallStatus::ok) {
      result.end = TradePagesEnd::lane_failed;
      return result;
    }
    result.answer = client.answer();
    if (carries_record(result.answer)) result.record = client.answer_record();
    if (result.answer.status != static_cast<std::uint16_t>(Status::ok)) {
      result.end = TradePagesEnd::refused;
      return result;
    }
    result.trades = static_cast<std::uint64_t>(result.answer.trades);
    const auto count = static_cast<std::uint64_t>(result.answer.extra[0]);
    if (count > room || static_cast<std::uint64_t>(result.answer.extra[1]) != got || got + count > result.trades) {
      result.end = TradePagesEnd::inconsistent;
      return result;
    }
    const std::span<const ipcfloor_trade> trades(reinterpret_cast<const ipcfloor_trade*>(bulk.data()), count);
    got += count;
    if (!page(got - count, trades) || got >= result.trades || count == 0) return result;
  }
}

}  // namespace ipcfloor
