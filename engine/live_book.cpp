#include "engine/live_book.hpp"

#include <algorithm>
#include <bit>

#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {

Expected<std::unique_ptr<LiveBook>> LiveBook::make(const LiveBookLimits& limits) {
  if (limits.lanes == 0 || limits.lanes > 64)
    return fail(ErrorCode::invalid_argument, "live mode needs 1..64 lanes, not {}", limits.lanes);
  std::unique_ptr<LiveBook> book(new LiveBook(limits));
  book->lanes_.resize(limits.lanes);
  for (LaneBook& lane : book->lanes_) {
    lane.subscriptions.resize(limits.subscriptions_per_lane);
    lane.arena.resize(limits.arena_doubles_per_lane);
  }
  return book;
}

Status LiveBook::subscribe(std::uint32_t lane, const Combo& combo, std::span<const double> history,
                           std::uint32_t& id, LiveBar& state) noexcept {
  if (validate_combo(combo, limits_.capacity_bars) != KernelStatus::ok) return Status::window_out_of_range;
  // The replay costs what a BACKTEST of the history would: the same bound applies.
  // One bar of this combo costs the sum of its windows, added to every APPEND from now on.
  const std::uint64_t per_bar = backtest_cost(combo, 1);
  if (limits_.max_catch_up_cost != 0 && backtest_cost(combo, history.size()) > limits_.max_catch_up_cost)
    return Status::too_costly;
  if (limits_.max_bar_cost != 0 && per_bar > limits_.max_bar_cost - std::min(cost_per_bar_, limits_.max_bar_cost))
    return Status::too_costly;
  LaneBook& book = lanes_[lane];
  const std::size_t need = LiveSignal::storage_doubles(combo);
  if (book.count == book.subscriptions.size() || need > book.arena.size() - book.arena_used) return Status::no_room;
  id = book.count;
  std::optional<LiveBacktest>& slot = book.subscriptions[id];
  slot.emplace(combo, limits_.fee, std::span<double>(book.arena).subspan(book.arena_used, need));
  book.arena_used += need;
  ++book.count;
  ++total_;
  book.cost_per_bar += per_bar;
  cost_per_bar_ += per_bar;
  for (std::size_t i = 0; i < history.size(); ++i) (void)slot->on_bar(history.first(i + 1));
  state = slot->last();
  lanes_with_subscriptions_ |= std::uint64_t{1} << lane;
  return Status::ok;
}

void LiveBook::on_bar_share(std::uint32_t first, std::uint32_t count, std::span<const double> history) noexcept {
  std::uint32_t skip = first;  // subscriptions of the order before the share
  for (std::uint64_t pending = lanes_with_subscriptions_; pending != 0 && count != 0; pending &= pending - 1) {
    LaneBook& book = lanes_[static_cast<std::size_t>(std::countr_zero(pending))];
    if (skip >= book.count) {
      skip -= book.count;
      continue;
    }
    const std::uint32_t end = std::min(book.count, skip + count);
    for (std::uint32_t id = skip; id < end; ++id) (void)book.subscriptions[id]->on_bar(history);
    count -= end - skip;
    skip = 0;
  }
}

void LiveBook::clear_lane(std::uint32_t lane) noexcept {
  LaneBook& book = lanes_[lane];
  for (std::uint32_t id = 0; id < book.count; ++id) book.subscriptions[id].reset();
  total_ -= book.count;
  book.count = 0;
  book.arena_used = 0;
  cost_per_bar_ -= book.cost_per_bar;
  book.cost_per_bar = 0;
  lanes_with_subscriptions_ &= ~(std::uint64_t{1} << lane);
}

}  // namespace ipcfloor
