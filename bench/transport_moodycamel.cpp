// moodycamel-thread: an in-process hand-off between two pinned threads through two
// moodycamel::ReaderWriterQueue (requests one way, replies the other), both sides spinning.
// This is what a program gets from a good lock-free SPSC queue without leaving its address
// space: the cross-core floor plus the queue's own bookkeeping.

#include <atomic>
#include <thread>

#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"
#include "common/rw_queue.hpp"
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
      // run_moodycamel_thread's exchange and after its finish().
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
  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  enum class Trip { answered, queue_full, server_gone };
  auto samples = time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) {
        request.seq = i;
        request.params = ladder_payload(i);
      },
      .exchange = [&](std::size_t) {
        if (!requests.try_enqueue(request)) return Trip::queue_full;
        while (!replies.try_dequeue(response)) {
          // acquire: pairs with the server lambda's release store when it could not pin (it never answers).
          if (server_failed.load(std::memory_order_acquire)) return Trip::server_gone;
          cpu_relax();
        }
        return Trip::answered;
      },
      .check = [&](std::size_t i, Trip trip) -> Expected<Answer> {
        if (trip == Trip::server_gone) return Answer::peer_gone;  // it says why below
        if (trip == Trip::queue_full)
          return fail(ErrorCode::protocol, "moodycamel-thread: the request queue is full with one request in flight");
        if (response.status != static_cast<std::uint16_t>(Status::ok) || response.seq != i ||
            response.echo() != request.params)
          return fail(ErrorCode::protocol, "moodycamel-thread: ECHO {} came back as seq {} status {} payload {}", i,
                      response.seq, response.status, response.echo().h);
        return Answer::answered;
      },
  });
  finish();
  if (!samples) return samples;
  // acquire: pairs with the server lambda's release store; join() in finish() ordered it already.
  if (server_failed.load(std::memory_order_acquire)) return std::unexpected(server_error);
  return samples;
}

}  // namespace ipcfloor
