#include "engine/live_book.hpp"

#include <algorithm>
#include <bit>
#include <limits>

namespace ipcfloor {

Expected<std::unique_ptr<LiveBook>> LiveBook::make(const LiveBookLimits& limits) {
  if (limits.lanes == 0 || limits.lanes > 64)
    return fail(ErrorCode::invalid_argument, "live mode needs 1..64 lanes, not {}", limits.lanes);
  std::unique_ptr<LiveBook> book(new LiveBook(limits));
  book->lanes_.resize(limits.lanes);
  for (LaneBook& lane : book->lanes_) {
    lane.subscriptions.resize(limits.subscriptions_per_lane);
    lane.arena = KernelWorkspace(limits.arena_bytes_per_lane);
  }
  return book;
}

Status LiveBook::subscribe(std::uint32_t lane, const Strategy& strategy, const Combo& combo,
                           const Bars& history, std::uint32_t& id, ipcfloor_strategy_bar& state) noexcept {
  if (!strategy.live()) return Status::no_live_step;
  if (!strategy.accepts(combo, limits_.capacity_bars)) return Status::window_out_of_range;
  // One bar of this combo costs its step_cost, added to every APPEND from now on; the replay
  // costs that for every bar so far, bounded as a BACKTEST of the history is.
  const std::uint64_t per_bar = strategy.step_cost(combo);
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t replay = history.empty() || per_bar <= kMax / history.size() ? per_bar * history.size() : kMax;
  if (limits_.max_catch_up_cost != 0 && replay > limits_.max_catch_up_cost) return Status::too_costly;
  if (limits_.max_bar_cost != 0 && per_bar > limits_.max_bar_cost - std::min(cost_per_bar_, limits_.max_bar_cost))
    return Status::too_costly;
  LaneBook& book = lanes_[lane];
  const std::uint64_t bytes = strategy.state_bytes(combo);
  const std::uint64_t need = bytes > kMax - 63 ? kMax : (bytes + 63) / 64 * 64;  // each state on its own lines
  if (book.count == book.subscriptions.size() || need > book.arena.bytes() - book.arena_used) return Status::no_room;
  id = book.count;
  Subscription& subscription = book.subscriptions[id];
  subscription.strategy = &strategy;
  subscription.state = static_cast<std::byte*>(book.arena.data()) + book.arena_used;
  subscription.last = ipcfloor_strategy_bar{};
  strategy.init(subscription.state, combo, limits_.fee);
  book.arena_used += need;
  ++book.count;
  ++total_;
  book.cost_per_bar += per_bar;
  cost_per_bar_ += per_bar;
  for (std::size_t i = 0; i < history.size(); ++i) (void)step(subscription, history.first(i + 1));
  state = subscription.last;
  lanes_with_subscriptions_ |= std::uint64_t{1} << lane;
  return Status::ok;
}

void LiveBook::on_bar_share(std::uint32_t first, std::uint32_t count, const Bars& history) noexcept {
  std::uint32_t skip = first;  // subscriptions of the order before the share
  for (std::uint64_t pending = lanes_with_subscriptions_; pending != 0 && count != 0; pending &= pending - 1) {
    LaneBook& book = lanes_[static_cast<std::size_t>(std::countr_zero(pending))];
    if (skip >= book.count) {
      skip -= book.count;
      continue;
    }
    const std::uint32_t end = std::min(book.count, skip + count);
    for (std::uint32_t id = skip; id < end; ++id) (void)step(book.subscriptions[id], history);
    count -= end - skip;
    skip = 0;
  }
}

void LiveBook::clear_lane(std::uint32_t lane) noexcept {
  LaneBook& book = lanes_[lane];
  for (std::uint32_t id = 0; id < book.count; ++id) book.subscriptions[id] = Subscription{};
  total_ -= book.count;
  book.count = 0;
  book.arena_used = 0;
  cost_per_bar_ -= book.cost_per_bar;
  book.cost_per_bar = 0;
  lanes_with_subscriptions_ &= ~(std::uint64_t{1} << lane);
}

}  // namespace ipcfloor
