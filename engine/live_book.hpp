#pragma once
// Live mode's engine-private state: which combos each lane subscribed (each on its strategy's
// per-bar step, include/ipcfloor/strategy.h), each one's state and last bar, and the memory they
// live in. The serving thread owns it; nothing of it is shared with
// a client, so a client can only ask for subscriptions, never write their state.
//
// Threads: make() is setup (allocates everything up front); every other call belongs to the
// serving thread, except on_bar_share (the workers' share of a bar), and all are noexcept,
// allocation-free and syscall-free.

#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "ipcfloor/strategy.h"
#include "kernel/strategy.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

struct LiveBookLimits {
  std::uint32_t lanes = 1;
  std::uint32_t subscriptions_per_lane = 256;
  // Bytes of subscription state per lane: a combo takes its strategy's state_bytes, rounded up to
  // a cache line (the built-in: about (s + p) doubles and a header).
  std::size_t arena_bytes_per_lane = std::size_t{1} << 19;
  std::size_t capacity_bars = 0;  // windows must fit the series' room
  double fee = 0.0;
  std::uint64_t max_catch_up_cost = 0;  // bound on a SUBSCRIBE's replay of the history (0: none)
  // Bound on what one new bar costs every subscription together (work units, each
  // subscription's step_cost): the work of an APPEND. 0: none.
  std::uint64_t max_bar_cost = 0;
};

class LiveBook {
 public:
  [[nodiscard]] static Expected<std::unique_ptr<LiveBook>> make(const LiveBookLimits& limits);

  // Adds `combo` on `strategy` to `lane` and replays `history` through it, so its state is the
  // one after the last published bar. Returns ok and the subscription's id and last bar, or why
  // not: no_live_step (the strategy has no per-bar step), window_out_of_range (the strategy refuses
  // the combo for capacity_bars), too_costly (the replay would cost more than max_catch_up_cost,
  // or every subscription together would make one APPEND cost more than max_bar_cost), no_room
  // (the lane's subscriptions or arena are used up). A pure function of the combo, the bars and
  // the subscriptions so far: the same verdict on every host.
  Status subscribe(std::uint32_t lane, const Strategy& strategy, const Combo& combo, const Bars& history,
                   std::uint32_t& id, ipcfloor_strategy_bar& state) noexcept;

  // Evaluates the subscriptions [first, first + count) of the book's order (lane by lane, each
  // lane's in id order) on the bar history.back(), each into its own state (see publish_bar).
  // Touches those subscriptions' state and nothing else of the book, so the serving thread may
  // give disjoint shares of one bar to several workers at once (engine/shm_server_live.cpp); it
  // must then leave the book alone until every share is back. Any thread; no allocation.
  void on_bar_share(std::uint32_t first, std::uint32_t count, const Bars& history) noexcept;

  // Evaluates every subscription on the bar history.back() and calls `publish(lane, id, state)`
  // for each as soon as it is done, lane by lane, then `lane_done(lane)` after a lane's last: the
  // serving thread's own way, so the first subscriber hears of a bar before the last combo is
  // computed. Serving thread only.
  template <class Publish, class LaneDone>
  void on_bar(const Bars& history, Publish&& publish, LaneDone&& lane_done) noexcept {
    for (std::uint64_t pending = lanes_with_subscriptions_; pending != 0; pending &= pending - 1) {
      const auto lane = static_cast<std::uint32_t>(std::countr_zero(pending));
      LaneBook& book = lanes_[lane];
      for (std::uint32_t id = 0; id < book.count; ++id) publish(lane, id, step(book.subscriptions[id], history));
      lane_done(lane);
    }
  }

  // After the workers' shares of a bar are back: calls `publish(lane, id, state)` for each
  // subscription with its state after that bar, in on_bar's order. Serving thread only.
  template <class Publish, class LaneDone>
  void publish_bar(Publish&& publish, LaneDone&& lane_done) const noexcept {
    for (std::uint64_t pending = lanes_with_subscriptions_; pending != 0; pending &= pending - 1) {
      const auto lane = static_cast<std::uint32_t>(std::countr_zero(pending));
      for_each(lane, [&](std::uint32_t id, const ipcfloor_strategy_bar& state) noexcept { publish(lane, id, state); });
      lane_done(lane);
    }
  }

  // Calls `visit(id, state)` for each subscription of `lane`, with its state after the last bar.
  template <class Visit>
  void for_each(std::uint32_t lane, Visit&& visit) const noexcept {
    const LaneBook& book = lanes_[lane];
    for (std::uint32_t id = 0; id < book.count; ++id) visit(id, static_cast<const ipcfloor_strategy_bar&>(book.subscriptions[id].last));
  }

  [[nodiscard]] std::uint32_t count(std::uint32_t lane) const noexcept { return lanes_[lane].count; }
  // Subscriptions of every lane together: the book's order runs over [0, total()).
  [[nodiscard]] std::uint32_t total() const noexcept { return total_; }

  // Forgets every subscription of `lane` (its client left).
  void clear_lane(std::uint32_t lane) noexcept;

  // What one new bar costs all subscriptions together (work units: each strategy's step_cost): the work of an APPEND.
  [[nodiscard]] std::uint64_t cost_per_bar() const noexcept { return cost_per_bar_; }

 private:
  struct Subscription {
    const Strategy* strategy = nullptr;
    void* state = nullptr;  // in its lane's arena
    ipcfloor_strategy_bar last{};
  };
  struct LaneBook {
    std::vector<Subscription> subscriptions;  // sized once; the first `count` are live
    KernelWorkspace arena{0};                 // their states
    std::uint32_t count = 0;
    std::size_t arena_used = 0;
    std::uint64_t cost_per_bar = 0;  // of this lane's subscriptions
  };
  static const ipcfloor_strategy_bar& step(Subscription& subscription, const Bars& history) noexcept {
    subscription.strategy->step(subscription.state, history, subscription.last);
    return subscription.last;
  }
  explicit LiveBook(const LiveBookLimits& limits) : limits_(limits) {}

  LiveBookLimits limits_;
  std::vector<LaneBook> lanes_;
  std::uint64_t lanes_with_subscriptions_ = 0;  // bit per lane
  std::uint64_t cost_per_bar_ = 0;              // of every lane's subscriptions
  std::uint32_t total_ = 0;                     // subscriptions of every lane
};

}  // namespace ipcfloor
