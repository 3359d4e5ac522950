// inproc-call: the request never leaves the thread. One ECHO RequestSlot goes through
// dispatch_request, the same code the engine's serving thread runs, into a ResponseSlot. Both
// "sides" are the measuring thread on the client core; server_cpu is unused. This rung is the
// cost of the engine's own work with no transport at all, plus the two ordered rdtsc reads
// every rung pays.

#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {

namespace {
using DispatchFn = Status (*)(const RequestSlot&, std::span<const double>, double, KernelWorkspace&, ResponseSlot&,
                              std::span<std::byte>, std::uint64_t) noexcept;
}  // namespace

Expected<std::vector<double>> run_inproc_call(const TransportContext& context) {
  unpin_current_thread();  // an earlier rung may have pinned this thread elsewhere
  KernelWorkspace workspace(1);  // ECHO never touches it; dispatch_request's signature wants one
  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  DispatchFn dispatch = &dispatch_request;
  return time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) {
        request.seq = i;
        request.params = ladder_payload(i);
        // Why the barrier: dispatch_request lives in another translation unit today, but an LTO
        // build could inline it and fold ECHO into a few moves, or hoist it out of the loop. The
        // empty asm makes the function pointer opaque, so the call is a real indirect call into
        // the engine's code; the "memory" clobber makes the compiler assume it reads `request`
        // and writes `response`, so neither the stores before nor the loads after can be elided.
        dispatch = &dispatch_request;
        __asm__ __volatile__("" : "+r"(dispatch) : : "memory");
      },
      .exchange = [&](std::size_t) { return dispatch(request, {}, 0.0, workspace, response, {}, 0); },
      .check = [&](std::size_t i, Status status) -> Expected<Answer> {
        if (status != Status::ok)
          return fail(ErrorCode::protocol, "inproc-call: ECHO {} answered {}", i, to_string(status));
        if (response.seq != i || response.echo() != request.params)
          return fail(ErrorCode::protocol, "inproc-call: ECHO {} came back as seq {} payload {}", i, response.seq,
                      response.echo().h);
        return Answer::answered;
      },
  });
}

}  // namespace ipcfloor
