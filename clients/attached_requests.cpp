// AttachedEngine's requests with options: a bar range, a fee, bars per year; statistics (STATS)
// and trade lists (TRADES). The plain calls are in attached_engine.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "clients/attached_engine.hpp"
#include "clients/client_codes.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/trade_pages.hpp"
#include "common/trade_stats.hpp"

namespace ipcfloor {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ipcfloor_stats to_c(const TradeStats& s) noexcept {
  return ipcfloor_stats{s.pnl,          s.trades,      s.wins,          s.win_rate,     s.profit_factor,
                        s.expectancy,   s.best_trade,  s.worst_trade,   s.avg_win,      s.avg_loss,
                        s.avg_trade_bars, s.exposure,  s.max_drawdown,  s.max_drawdown_bars, s.sharpe,
                        s.sortino,      s.calmar,      s.bars};
}

}  // namespace

ipcfloor_stats SweepOutput::no_stats(double pnl, std::int64_t trades) noexcept {
  return ipcfloor_stats{pnl, trades, 0,    kNaN, kNaN, kNaN, kNaN, kNaN, kNaN,
                        kNaN, kNaN,  kNaN, kNaN, 0,    kNaN, kNaN, kNaN, 0};
}

std::span<const double> AttachedEngine::request_bars(const ipcfloor_request& request) const noexcept {
  if (request.series >= series_count_) return {};
  // The main series of a live engine grows: its bars as published now.
  const std::span<const double> whole = request.series == 0 && live() ? published_series() : table_[request.series];
  if (request.to_bar == 0) return request.from_bar == 0 ? whole : std::span<const double>{};
  if (request.to_bar > whole.size() || request.from_bar > request.to_bar || request.to_bar - request.from_bar < 2)
    return {};
  return whole.subspan(request.from_bar, request.to_bar - request.from_bar);
}

int AttachedEngine::prepare(const ipcfloor_request& request, RequestOptions& options, bool& with_options) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int held = check_series(request.series); held != IPCFLOOR_OK) return held;
  if (const int known = check_strategy(request.strategy); known != IPCFLOOR_OK) return known;
  options = RequestOptions{};
  if (request.to_bar != 0 || request.from_bar != 0) {
    if (request_bars(request).empty()) {
      const std::size_t bars = request.series == 0 && live() ? published_series().size() : table_[request.series].size();
      write_message_to(message_, "bars [{}, {}) are not a range of series {} ({}) of engine {}: it holds {} bars, and a "
                       "range needs at least 2 of them (to_bar 0 means the whole series, from_bar 0 with it)",
                       request.from_bar, request.to_bar, request.series, series_key(request.series), engine_name(), bars);
      return IPCFLOOR_E_BAD_RANGE;
    }
    if (request.to_bar != 0) {
      options.present |= kOptionRange;
      options.from_bar = request.from_bar;
      options.to_bar = request.to_bar;
    }
  }
  if (!std::isnan(request.fee)) {
    if (!std::isfinite(request.fee) || request.fee < 0.0 || request.fee > kMaxFee) {
      write_message_to(message_, "fee {} is outside [0, {}] percentage points per round trip (NaN: the engine's, {})",
                       request.fee, kMaxFee, fee_);
      return IPCFLOOR_E_INVALID;
    }
    options.present |= kOptionFee;
    options.fee = request.fee;
  }
  if (request.bars_per_year != 0.0) {
    if (!std::isfinite(request.bars_per_year) || request.bars_per_year < 0.0 || request.bars_per_year > kMaxBarsPerYear) {
      write_message_to(message_, "bars_per_year {} is outside (0, {}] (0: the engine's)", request.bars_per_year,
                       kMaxBarsPerYear);
      return IPCFLOOR_E_INVALID;
    }
    options.present |= kOptionBarsPerYear;
    options.bars_per_year = request.bars_per_year;
  }
  with_options = options.present != 0;
  return settle();
}

int AttachedEngine::call_one(Opcode opcode, const ipcfloor_request& request, const std::int64_t params[6],
                             const RequestOptions* options) noexcept {
  const CallStatus got =
      client_.call(opcode, request_flags(request.series, request.strategy), payload_of(params), options);
  if (got != CallStatus::ok) return lane_failure(got);
  const ResponseSlot& answer = client_.answer();
  if (answer.status == static_cast<std::uint16_t>(Status::ok)) return IPCFLOOR_OK;
  const AnswerRecord* record = carries_record(answer) ? &client_.answer_record() : nullptr;
  return combo_refused(params, answer, 0, 1, request.series, request.strategy, record);
}

int AttachedEngine::backtest(const ipcfloor_request& request, const std::int64_t params[6], double& pnl,
                             std::int64_t& trades) noexcept {
  RequestOptions options;
  bool with_options = false;
  if (const int ready = prepare(request, options, with_options); ready != IPCFLOOR_OK) return ready;
  if (const int got = call_one(Opcode::backtest, request, params, with_options ? &options : nullptr); got != IPCFLOOR_OK)
    return got;
  pnl = client_.answer().pnl;
  trades = client_.answer().trades;
  return IPCFLOOR_OK;
}

int AttachedEngine::stats(const ipcfloor_request& request, const std::int64_t params[6], ipcfloor_stats& out) noexcept {
  RequestOptions options;
  bool with_options = false;
  if (const int ready = prepare(request, options, with_options); ready != IPCFLOOR_OK) return ready;
  if (const int got = call_one(Opcode::stats, request, params, with_options ? &options : nullptr); got != IPCFLOOR_OK)
    return got;
  const ResponseSlot& answer = client_.answer();
  out = to_c(from_wire(answer.pnl, answer.trades, client_.answer_record().stats));
  return IPCFLOOR_OK;
}

void AttachedEngine::reason_for(char (&out)[IPCFLOOR_REASON_BYTES], const ResponseSlot& answer,
                                const AnswerRecord& record, std::uint32_t strategy) const noexcept {
  const StrategyEntry* entry = strategy_at(strategy);
  const char* name = entry != nullptr ? entry->name : "?";
  switch (static_cast<Status>(answer.status)) {
    case Status::window_out_of_range:
      if (answer.extra[2] == kRecordWhy) {
        write_message_to(out, "{}", std::string_view(record.why, strnlen(record.why, sizeof record.why)));
      } else {
        write_message_to(out, "strategy {} refuses these parameters for a series of {} bars", name, answer.extra[1]);
      }
      return;
    case Status::missing_column:
      write_message_to(out, "strategy {} needs the {} column, which this series does not have", name,
                       column_name(static_cast<std::uint64_t>(answer.extra[0])));
      return;
    case Status::no_trade_report:
      write_message_to(out, "strategy {} is built against version 1 of the strategy ABI and reports no trades: no "
                       "statistics (rebuild it against this ipcfloor's strategy.h)", name);
      return;
    case Status::bad_range:
      write_message_to(out, "the bar range is not within the series' {} bars (or holds fewer than 2)", answer.extra[1]);
      return;
    default:
      write_message_to(out, "{} (status {})", to_string(static_cast<Status>(answer.status)), answer.status);
      return;
  }
}

int AttachedEngine::sweep(const ipcfloor_request& request, const std::int64_t (*params)[6], std::size_t n,
                          const SweepOutput& out) noexcept {
  RequestOptions options;
  bool with_options = false;
  if (const int held = prepare(request, options, with_options); held != IPCFLOOR_OK) {
    for (std::size_t i = 0; i < n; ++i) out.set(i, kNaN, 0, held);
    return held;
  }
  const Opcode opcode = out.stats != nullptr ? Opcode::stats : Opcode::backtest;
  const std::uint16_t flags = request_flags(request.series, request.strategy);
  int refused = 0;
  const auto send = [&](std::size_t i) noexcept {
    return SweepRequest{opcode, flags, payload_of(params[i]), with_options ? &options : nullptr};
  };
  const auto take = [&](std::size_t i, const ResponseSlot& answer, const AnswerRecord& record) noexcept {
    if (answer.status == static_cast<std::uint16_t>(Status::ok)) {
      if (out.stats != nullptr) {
        out.stats[i] = to_c(from_wire(answer.pnl, answer.trades, record.stats));
        if (out.status != nullptr) out.status[i] = IPCFLOOR_OK;
        if (out.reasons != nullptr) out.reasons[i][0] = '\0';
      } else {
        out.set(i, answer.pnl, answer.trades, IPCFLOOR_OK);
      }
      return;
    }
    // Only the first refusal is put into a whole sentence (last_error): formatting every one would
    // cost a bad grid time. Each row's own reason is short, and asked for.
    const AnswerRecord* has = carries_record(answer) ? &record : nullptr;
    const int code = refused == 0 ? combo_refused(params[i], answer, i, n, request.series, request.strategy, has)
                                  : code_for(answer.status);
    ++refused;
    out.set(i, kNaN, 0, code);
    if (out.reasons != nullptr) reason_for(out.reasons[i], answer, record, request.strategy);
  };
  const SweepEnd end = pipelined_sweep(client_, n, send, take);
  if (end.status == CallStatus::ok) return refused;
  const int code = lane_failure(end.status);
  for (std::size_t i = end.answered; i < n; ++i) out.set(i, kNaN, 0, code);
  return code;
}

int AttachedEngine::trades(const ipcfloor_request& request, const std::int64_t params[6], ipcfloor_trade* out,
                           std::size_t capacity, std::size_t& count, ipcfloor_stats* stats, double* equity) noexcept {
  RequestOptions options;
  bool with_options = false;
  if (const int ready = prepare(request, options, with_options); ready != IPCFLOOR_OK) return ready;
  std::size_t got = 0;
  const auto keep = [&](std::uint64_t first, std::span<const ipcfloor_trade> page) noexcept {
    const std::size_t room = first < capacity ? std::min<std::size_t>(page.size(), capacity - first) : 0;
    if (room != 0) std::memcpy(out + first, page.data(), room * sizeof(ipcfloor_trade));
    got = first + page.size();
    return got < capacity;  // capacity 0 (or a full buffer): the first page says how many there are
  };
  const TradePagesResult fetched =
      fetch_trade_pages(client_, request_flags(request.series, request.strategy), payload_of(params), options, keep);
  switch (fetched.end) {
    case TradePagesEnd::ok: break;
    case TradePagesEnd::refused:
      return combo_refused(params, fetched.answer, 0, 1, request.series, request.strategy,
                           carries_record(fetched.answer) ? &fetched.record : nullptr);
    case TradePagesEnd::lane_failed: return lane_failure(fetched.lane);
    case TradePagesEnd::inconsistent:
      write_message_to(message_, "engine {} (pid {}) answered a trade page that does not fit its request (trades {} to "
                       "{} of {})", engine_name(), engine_pid_, fetched.answer.extra[1],
                       fetched.answer.extra[1] + fetched.answer.extra[0], fetched.answer.trades);
      return IPCFLOOR_E_CORRUPT;
    case TradePagesEnd::no_room:
      write_message_to(message_, "engine {} (pid {}) runs with --bulk-bytes 0: its lanes have no room to send a trade "
                       "list through (serve it with --bulk-bytes of at least {})", engine_name(), engine_pid_,
                       sizeof(ipcfloor_trade));
      return IPCFLOOR_E_RESOURCE;
  }
  count = static_cast<std::size_t>(fetched.trades);
  if (count > capacity) {
    write_message_to(message_, "the combo closed {} trades; the buffer holds {} (call again with room for {})", count,
                     capacity, count);
    return IPCFLOOR_E_RESOURCE;
  }
  if (stats != nullptr) *stats = to_c(from_wire(fetched.answer.pnl, fetched.answer.trades, fetched.record.stats));
  if (equity != nullptr) {
    // The curve from the list and the bars, by the code the engine's figures came from.
    const std::span<const double> bars = request_bars(request);
    TradeStats again;
    const double year = request.bars_per_year != 0.0 ? request.bars_per_year : client_.segment().header().bars_per_year;
    if (stats_from_trades(bars, std::span<const ipcfloor_trade>(out, count), year, std::span<double>(equity, bars.size()),
                          again) != TradeCheck::ok) {
      write_message_to(message_, "engine {} sent a trade list that does not fit its series", engine_name());
      return IPCFLOOR_E_CORRUPT;
    }
  }
  return IPCFLOOR_OK;
}

}  // namespace ipcfloor
