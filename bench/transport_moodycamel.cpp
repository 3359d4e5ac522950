// moodycamel-thread: an in-process hand-off between two pinned threads through two
// moodycamel::ReaderWriterQueue (requests one way, replies the other), both sides spinning.
// This is what a program gets from a good lock-free SPSC queue without leaving its address
// space: the cross-core floor plus the queue's own bookkeeping.

#include <atomic>
#include <thread>

#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"
#include "engine/rw_queue.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

namespace {
// At most one request is in flight, so a few slots are plenty; try_enqueue never allocates,
// which keeps malloc out of the timed path.
constexpr std::size_t kQueueCapacity = 16;
}  // namespace

Expected<std::vector<double>> run_moodycamel_thread(const TransportContext& context) {
  moodycamel::ReaderWriterQueue<RequestSlot> requests(kQueueCapacity);
  moodycamel::ReaderWriterQueue<ResponseSlot> replies(kQueueCapacity);
  std::atomic<bool> stop{false};
  std::atomic<bool> server_failed{false};
  Error server_error{ErrorCode::io, ""};

  unpin_current_thread();  // the server thread inherits this mask

  std::thread server([&] {
    if (auto pinned = pin_current_thread(context.server_cpu); !pinned) {
      server_error = pinned.error();
      // release: publishes server_error; pairs with the acquire loads of server_failed in
      // run_moodycamel_thread's client loop and after its finish().
      server_failed.store(true, std::memory_order_release);
      return;
    }
    KernelWorkspace workspace(1);  // ECHO never touches it
    RequestSlot request{};
    ResponseSlot response{};
    // acquire: pairs with the release store of stop in finish() (run_moodycamel_thread).
    while (!stop.load(std::memory_order_acquire)) {
      if (!requests.try_dequeue(request)) {
        cpu_relax();
        continue;
      }
      (void)dispatch_request(request, {}, 0.0, workspace, response);  // the client checks the status
      while (!replies.try_enqueue(response)) cpu_relax();
    }
  });

  const auto finish = [&] {
    // release: ends the server loop; pairs with the acquire load of stop in the server lambda.
    stop.store(true, std::memory_order_release);
    server.join();
  };
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) {
    finish();
    return std::unexpected(pinned.error());
  }
  std::vector<double> samples = reserved_samples(context);
  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  const std::size_t total = context.warmup + context.samples;
  for (std::size_t i = 0; i < total; ++i) {
    request.seq = i;
    request.params = ladder_payload(i);
    bool answered = true;
    const std::uint64_t t0 = TscClock::now();
    if (!requests.try_enqueue(request)) {
      finish();
      return fail(ErrorCode::protocol, "moodycamel-thread: the request queue is full with one request in flight");
    }
    while (!replies.try_dequeue(response)) {
      // acquire: pairs with the server lambda's release store when it could not pin (it never answers).
      if (server_failed.load(std::memory_order_acquire)) {
        answered = false;
        break;
      }
      cpu_relax();
    }
    const std::uint64_t t1 = TscClock::now();
    if (!answered) break;
    if (response.status != static_cast<std::uint16_t>(Status::ok) || response.seq != i ||
        response.echo() != request.params) {
      finish();
      return fail(ErrorCode::protocol, "moodycamel-thread: ECHO {} came back as seq {} status {} payload {}", i,
                  response.seq, response.status, response.echo().h);
    }
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  finish();
  // acquire: pairs with the server lambda's release store; join() in finish() ordered it already.
  if (server_failed.load(std::memory_order_acquire)) return std::unexpected(server_error);
  return samples;
}

}  // namespace ipcfloor
