// boost-message-queue: Boost.Interprocess message_queue, the portable "IPC queue" many C++
// programs reach for. Two queues (requests, replies) in shared memory, each guarded by a
// process-shared mutex and condition variable, so a waiting side sleeps in the kernel and is
// woken by a futex call. The echo side is a forked process pinned to the server core that
// answers through dispatch_request, as the engine would.

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>

#include <boost/date_time/posix_time/posix_time_types.hpp>
#include <boost/interprocess/ipc/message_queue.hpp>

#include "bench/child_exit.hpp"
#include "bench/echo_peer.hpp"
#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {

namespace {

namespace bip = boost::interprocess;

constexpr std::size_t kPayloadBytes = sizeof(Combo);
// One request is in flight at a time; a little room keeps a late stop message from blocking.
constexpr std::size_t kQueueDepth = 4;
constexpr long kCallTimeoutSeconds = 5;
// The echo side gives up when nothing arrives for this long (its parent hung or vanished).
constexpr long kIdleTimeoutSeconds = 30;

// Removes both queues whichever way the run ends; a killed run leaves them in /dev/shm.
class QueueNames {
 public:
  QueueNames() {
    static std::atomic<int> counter{0};
    // relaxed: only distinctness matters.
    const std::string tag = std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
    requests_ = "ipcfloor-mq-req-" + tag;
    replies_ = "ipcfloor-mq-rep-" + tag;
  }
  QueueNames(const QueueNames&) = delete;
  QueueNames& operator=(const QueueNames&) = delete;
  ~QueueNames() {
    bip::message_queue::remove(requests_.c_str());
    bip::message_queue::remove(replies_.c_str());
  }
  [[nodiscard]] const char* requests() const noexcept { return requests_.c_str(); }
  [[nodiscard]] const char* replies() const noexcept { return replies_.c_str(); }

 private:
  std::string requests_;
  std::string replies_;
};

// message_queue's timed calls take an absolute UTC deadline.
boost::posix_time::ptime deadline_after(long seconds) {
  return boost::posix_time::microsec_clock::universal_time() + boost::posix_time::seconds(seconds);
}

// The forked echo side. Returns its exit status: 0 after the empty stop message.
int serve_echo(const QueueNames& names, int cpu) {
  if (!pin_current_thread(cpu)) return kEchoPinFailed;
  try {
    bip::message_queue requests(bip::open_only, names.requests());
    bip::message_queue replies(bip::open_only, names.replies());
    EchoPeer peer;
    for (std::uint64_t seq = 0;; ++seq) {
      bip::message_queue::size_type got = 0;
      unsigned priority = 0;
      if (!requests.timed_receive(&peer.params(), kPayloadBytes, got, priority, deadline_after(kIdleTimeoutSeconds))) return kEchoIdle;
      if (got == 0) return kEchoStopped;
      if (got != kPayloadBytes) return kEchoBadFrame;
      if (!peer.answer(seq)) return kEchoDispatchFailed;
      const Combo echoed = peer.reply();
      if (!replies.timed_send(&echoed, kPayloadBytes, 0, deadline_after(kIdleTimeoutSeconds))) return kEchoIdle;
    }
  } catch (const bip::interprocess_exception&) {
    return kEchoSetupFailed;
  }
}

}  // namespace

Expected<std::vector<double>> run_boost_message_queue(const TransportContext& context) {
  unpin_current_thread();  // the forked echo side inherits this mask, then pins itself
  QueueNames names;
  std::optional<bip::message_queue> requests;
  std::optional<bip::message_queue> replies;
  try {
    requests.emplace(bip::create_only, names.requests(), kQueueDepth, kPayloadBytes);
    replies.emplace(bip::create_only, names.replies(), kQueueDepth, kPayloadBytes);
  } catch (const bip::interprocess_exception& e) {
    return fail(ErrorCode::io, "boost-message-queue: creating {} and {}: {}", names.requests(), names.replies(), e.what());
  }

  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return fail(ErrorCode::io, "boost-message-queue: fork: {}", std::strerror(errno));
  if (child == 0) {
    // The echo side must not outlive a benchmark that was killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    _exit(getppid() == parent ? serve_echo(names, context.server_cpu) : kEchoOrphaned);
  }
  Combo payload{};
  Combo reply{};
  bip::message_queue::size_type got = 0;
  boost::posix_time::ptime deadline;
  Expected<std::vector<double>> samples = std::unexpected(Error{ErrorCode::io, "not run"});
  try {
    samples = time_round_trips(context, RoundTrip{
        .prepare = [&](std::size_t i) {
          payload = ladder_payload(i);
          reply = Combo{};
          // The deadline is taken before the clock starts: the bound is ours, not the transport's cost.
          deadline = deadline_after(kCallTimeoutSeconds);
        },
        .exchange = [&](std::size_t) {
          unsigned priority = 0;
          return requests->timed_send(&payload, kPayloadBytes, 0, deadline) &&
                 replies->timed_receive(&reply, kPayloadBytes, got, priority, deadline);
        },
        .check = [&](std::size_t i, bool received) -> Expected<Answer> {
          if (!received)
            return fail(ErrorCode::peer_gone, "boost-message-queue: round trip {}: the echo process (pid {}) {}", i,
                        child, describe_echo_process(child));
          if (got != kPayloadBytes || reply != payload)
            return fail(ErrorCode::protocol, "boost-message-queue: ECHO {} came back as {} bytes, payload {}", i, got,
                        reply.h);
          return Answer::answered;
        },
    });
    // The empty message tells the echo side to exit.
    const Combo unused{};
    (void)requests->timed_send(&unused, 0, 0, deadline_after(kCallTimeoutSeconds));
  } catch (const bip::interprocess_exception& e) {
    samples = fail(ErrorCode::io, "boost-message-queue: {}", e.what());
  }
  const int status = reap_child(child, std::chrono::seconds(5));
  if (!samples) return samples;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(ErrorCode::peer_gone, "boost-message-queue: the echo process ended with wait status {}", status);
  return samples;
}

}  // namespace ipcfloor
