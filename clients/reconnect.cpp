#include "clients/reconnect.hpp"

#include <algorithm>
#include <bit>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ipcfloor {
namespace {

// Whether attaching again is worth another try: the engine is not there yet (or stopping), busy,
// or slow to answer. Anything else (another user's socket, another layout, a bad name) will not
// change by waiting.
bool worth_waiting(ErrorCode code) noexcept {
  return code == ErrorCode::peer_gone || code == ErrorCode::busy || code == ErrorCode::timeout ||
         code == ErrorCode::io;
}

std::int64_t ms_since(std::chrono::steady_clock::time_point began) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
}

// The first bar two series disagree on (bit for bit) among those both hold; nullopt when none.
std::optional<std::size_t> first_difference(std::span<const double> a, std::span<const double> b) noexcept {
  const std::size_t common = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < common; ++i)
    if (std::bit_cast<std::uint64_t>(a[i]) != std::bit_cast<std::uint64_t>(b[i])) return i;
  return std::nullopt;
}

}  // namespace

Reconnect::Reconnect(std::string name, ShmClientOptions options, ReconnectPolicy policy)
    : name_(std::move(name)), options_(std::move(options)), policy_(policy) {}

void Reconnect::subscribed(const Combo& combo, std::uint32_t strategy, const ResponseSlot& answer) {
  if (!policy_.enabled || answer.extra[0] < 0) return;
  const auto id = static_cast<std::size_t>(answer.extra[0]);
  if (id >= subscriptions_.size()) subscriptions_.resize(id + 1);
  Subscription& subscription = subscriptions_[id];
  subscription.combo = combo;
  subscription.strategy = strategy;
  subscription.last_bar = answer.extra[1] > 0 ? static_cast<std::uint64_t>(answer.extra[1] - 1) : 0;
  subscription.restarted = false;
}

std::uint64_t Reconnect::on_signal(SignalSlot& signal) noexcept {
  if (signal.subscription >= subscriptions_.size()) return 0;
  Subscription& subscription = subscriptions_[signal.subscription];
  std::uint64_t missed = 0;
  if (subscription.restarted) {
    signal.flags = static_cast<std::uint16_t>(signal.flags | kSignalRestart);
    missed = subscription.missed;
    subscription.restarted = false;
  }
  subscription.last_bar = std::max(subscription.last_bar, signal.bar);
  return missed;
}

Expected<ShmClient> Reconnect::attach_again(const InterruptCheck& interrupt, bool& interrupted) {
  ShmClientOptions options = options_;
  options.reattaches = static_cast<std::uint32_t>(std::min<std::uint64_t>(restarts_ + 1, UINT32_MAX));
  const auto began = std::chrono::steady_clock::now();
  const auto deadline = began + policy_.limit;
  std::chrono::nanoseconds pause = kReconnectFirstPause;
  for (int tries = 1;; ++tries) {
    auto fresh = ShmClient::connect(name_, options);
    if (fresh) return fresh;
    if (!worth_waiting(fresh.error().code))
      return fail(fresh.error().code, "engine {} went away, and attaching to it again failed: {}", name_,
                  fresh.error().message);
    if (std::chrono::steady_clock::now() + pause >= deadline)
      return fail(ErrorCode::peer_gone, "engine {} went away and did not come back within {} ms (the reconnect "
                  "limit; {} tries, the last: {})", name_,
                  std::chrono::duration_cast<std::chrono::milliseconds>(policy_.limit).count(), tries,
                  fresh.error().message);
    if (interrupt.check != nullptr && interrupt.check(interrupt.context) != 0) {
      interrupted = true;
      return fail(ErrorCode::peer_gone, "re-attaching to engine {} was interrupted after {} ms", name_, ms_since(began));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::nanoseconds>(pause * 2, kReconnectLastPause);
  }
}

Expected<void> Reconnect::resubscribe(ShmClient& fresh) {
  std::uint64_t bars = fresh.segment().published_series().size();
  for (std::size_t id = 0; id < subscriptions_.size(); ++id) {
    Subscription& subscription = subscriptions_[id];
    ResponseSlot answer{};
    if (const CallStatus got = fresh.subscribe(subscription.combo, answer, subscription.strategy); got != CallStatus::ok)
      return fail(ErrorCode::peer_gone, "engine {} came back, but subscribing combo {} again failed: {}", name_, id,
                  fresh.describe(got));
    if (answer.status != static_cast<std::uint16_t>(Status::ok) || answer.extra[0] != static_cast<std::int64_t>(id))
      return fail(ErrorCode::peer_gone, "engine {} came back, but refused combo {} [{}] that it served before: {} "
                  "(status {})", name_, id, fmt::join(subscription.combo.as_array(), ","),
                  to_string(static_cast<Status>(answer.status)), answer.status);
    bars = static_cast<std::uint64_t>(std::max<std::int64_t>(answer.extra[1], 1));
    subscription.missed = bars - 1 > subscription.last_bar ? bars - 1 - subscription.last_bar : 0;
    subscription.restarted = true;
  }
  if (!subscriptions_.empty()) {
    // One frame per subscription with its state now. A ring too full for them (never on a fresh
    // lane but for a huge book) leaves the SUBSCRIBE answers' states: the restart flag then comes
    // with the next bar.
    ResponseSlot answer{};
    (void)fresh.snapshot(answer);
  }
  return {};
}

CallStatus Reconnect::recover(ShmClient& client, const InterruptCheck& interrupt) {
  if (!policy_.enabled) return CallStatus::engine_gone;
  const auto began = std::chrono::steady_clock::now();
  const pid_t old_pid = client.segment().engine_pid();
  bool interrupted = false;
  auto fresh = attach_again(interrupt, interrupted);
  if (interrupted) {
    note_ = fresh.error().message;
    return CallStatus::interrupted;
  }
  if (!fresh) {
    note_ = fresh.error().message;
    return CallStatus::engine_gone;
  }
  const std::span<const double> before = client.segment().published_series();
  const std::span<const double> after = fresh->segment().published_series();
  if (const auto differ = first_difference(before, after)) {
    note_ = fmt::format("engine {} came back (pid {}) with other bars: its bar {} is {} where the engine that went "
                        "away (pid {}) held {}; this client does not re-attach to it",
                        name_, fresh->segment().engine_pid(), *differ, after[*differ], old_pid, before[*differ]);
    return CallStatus::engine_gone;
  }
  if (auto renewed = resubscribe(*fresh); !renewed) {
    note_ = renewed.error().message;
    return CallStatus::engine_gone;
  }
  const std::size_t seen = before.size();
  retired_.push_back(std::move(client).retire());
  client = std::move(*fresh);
  ++restarts_;
  note_ = fmt::format("engine {} went away (pid {}); re-attached to pid {} on lane {} after {} ms (restart {}), {} "
                      "subscription{} renewed; it holds {} bars, this client had seen {}{}",
                      name_, old_pid, client.segment().engine_pid(), client.lane(), ms_since(began), restarts_,
                      subscriptions_.size(), subscriptions_.size() == 1 ? "" : "s", after.size(), seen,
                      after.size() < seen ? " (bars were lost: the engine did not keep every bar it had published)"
                                          : "");
  return CallStatus::engine_restarted;
}

}  // namespace ipcfloor
