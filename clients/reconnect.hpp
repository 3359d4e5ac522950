#pragma once
// Re-attaching to an engine that went away (a crash, an OOM kill, a deploy, `systemctl restart`).
// Opt-in, and named `reconnect` wherever a client is made: the C ABI's ipcfloor_options, the C++
// facade's ClientOptions, Python's attach(name, reconnect=True), the CLI's `signals --reconnect`
// and `feed --reconnect`; all of them go through this class.
//
// When a call finds its engine gone (CallStatus::engine_gone), recover():
//   1. attaches to the same name again, with a pause that doubles from 1 ms to 50 ms between
//      tries, until an engine answers or the client's limit (ReconnectPolicy::limit) runs out;
//   2. checks that the engine that came back continues the series this client saw (every bar
//      both hold is the same, bit for bit), else it is not "the same engine" and the client
//      stays gone;
//   3. subscribes every combo this client had subscribed again, in the same order, so that each
//      keeps its id, and asks for a SNAPSHOT: one frame per subscription with its state now;
//   4. answers the call that was in flight CallStatus::engine_restarted. It never retries it: an
//      APPEND may or may not have been journaled before the crash, and only the caller can tell
//      (the engine's last bar says which: `feed --reconnect` continues from the bar after it).
// The first frame of each subscription read after that carries kSignalRestart, and
// on_signal() says how many bars that subscription did not see as they happened (the bars the
// new engine holds past the last one this client had heard of).
//
// The old engine's data stays mapped until this object goes, so a view of its series taken
// before the restart stays valid (the C ABI's promise: a series pointer lives until detach).
//
// Threads: the client's (one at a time). recover() is a slow path (system calls, sleeps,
// allocation); subscribed() allocates; on_signal() does neither.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "clients/shm_client.hpp"
#include "common/combo.hpp"

namespace ipcfloor {

inline constexpr std::chrono::nanoseconds kDefaultReconnectLimit = std::chrono::seconds(30);
inline constexpr std::chrono::nanoseconds kMaxReconnectLimit = std::chrono::hours(24);
inline constexpr std::chrono::nanoseconds kMinReconnectLimit = std::chrono::milliseconds(1);
inline constexpr std::chrono::milliseconds kReconnectFirstPause{1};
inline constexpr std::chrono::milliseconds kReconnectLastPause{50};

struct ReconnectPolicy {
  bool enabled = false;
  // How long one outage may last: recover() gives up once this has passed since it began.
  std::chrono::nanoseconds limit = kDefaultReconnectLimit;
};

class Reconnect {
 public:
  // `name` and `options` as the client was attached with. Allocates.
  Reconnect(std::string name, ShmClientOptions options, ReconnectPolicy policy);

  [[nodiscard]] bool enabled() const noexcept { return policy_.enabled; }
  // Outages survived so far: engines this client re-attached to.
  [[nodiscard]] std::uint64_t restarts() const noexcept { return restarts_; }
  // What the last recover() did, in a sentence ("" before the first): where it re-attached and
  // how long it took, or why it gave up.
  [[nodiscard]] const std::string& note() const noexcept { return note_; }

  // A SUBSCRIBE the engine took (its answer: id in extra[0], bars published in extra[1]): it is
  // subscribed again after a re-attach. Allocates (once per subscription).
  void subscribed(const Combo& combo, std::uint32_t strategy, const ResponseSlot& answer);
  // Every signal read: its subscription's last bar. The first frame of each subscription after a
  // re-attach gets kSignalRestart; the return value is then the bars it did not see as they
  // happened (0 otherwise). No allocation, no system call.
  std::uint64_t on_signal(SignalSlot& signal) noexcept;

  // After a call on `client` returned engine_gone (nothing else): re-attaches as above. Returns
  // engine_restarted with `client` replaced (its old engine's data kept mapped), engine_gone
  // when no engine came back within the limit or the one that did is not the same (note() says
  // which; `client` is left as it was), interrupted when `interrupt` asked to stop, or engine_gone
  // at once when reconnecting is off.
  [[nodiscard]] CallStatus recover(ShmClient& client, const InterruptCheck& interrupt = {});

 private:
  struct Subscription {
    Combo combo;
    std::uint32_t strategy = 0;
    std::uint64_t last_bar = 0;  // the last bar this client heard of for it
    std::uint64_t missed = 0;    // told with the first frame after a restart
    bool restarted = false;      // that frame is still to come
  };
  // Attaches again, pausing between tries, until the deadline. Errors say why it gave up.
  [[nodiscard]] Expected<ShmClient> attach_again(const InterruptCheck& interrupt, bool& interrupted);
  // The old client's subscriptions on `fresh`, and its snapshot. An error names the refusal.
  [[nodiscard]] Expected<void> resubscribe(ShmClient& fresh);

  std::string name_;
  ShmClientOptions options_;
  ReconnectPolicy policy_;
  std::vector<Subscription> subscriptions_;  // by id
  std::vector<Attachment> retired_;          // the engines that went away: their data, still mapped
  std::uint64_t restarts_ = 0;
  std::string note_;
};

}  // namespace ipcfloor
