// The serving thread's hot path in spin mode makes no syscall and takes no page fault: counted
// with ptrace and /proc over a million requests, half through the exchange line and half through
// the rings (docs/SPEC.md §3, §7.6).

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "bench/hygiene.hpp"

TEST_CASE("a million spin-mode requests, through the exchange line and the rings, cost the serving thread no "
          "syscall and no page fault; live APPENDs through an engine with a journal cost it no syscall") {
#if defined(__SANITIZE_THREAD__)
  // TSan's runtime takes its own locks (futex, sched_yield) on the threads it instruments: what
  // it counts there is the runtime's, not the engine's. The release and ASan suites count.
  MESSAGE("skipped: ThreadSanitizer's runtime makes its own syscalls on the serving thread");
  return;
#endif
  ipcfloor::HygieneOptions options;
  options.binary = IPCFLOOR_BINARY;
  options.echo_requests = 500'000;  // per path
  if (const char* n = std::getenv("IPCFLOOR_HYGIENE_REQUESTS")) options.echo_requests = std::stoul(n);
  options.backtest_requests = 5'000;
  options.append_requests = 5'000;
  options.memory_touch_bytes = 8 << 20;
  auto report = ipcfloor::run_hygiene(options);
  REQUIRE_MESSAGE(report.has_value(), (report ? "" : report.error().message));
  int engine_rows = 0;
  for (const auto& row : (*report)["results"]) {
    CAPTURE(row.dump());
    if (row["side"] == "socket server thread") {
      // The comparison row: a socket round trip costs its server thread syscalls, which also
      // shows that the counter sees them.
      CHECK(row["syscalls_per_request"].get<double>() >= 1.0);
      continue;
    }
    ++engine_rows;
    CHECK(row["syscalls"].get<std::uint64_t>() == 0);
    // An APPEND writes its bar into the series' room: a page of it the client's appends reach
    // for the first time may fault (where the data object could not be locked in memory).
    if (row["opcode"] == "append (journaled)") continue;
    CHECK(row["minor_faults"].get<std::uint64_t>() == 0);
    CHECK(row["major_faults"].get<std::uint64_t>() == 0);
    // Counted without the tracer: a spinning thread never blocks. Preemption by other tasks
    // (involuntary) depends on the host and is reported, not asserted.
    CHECK(row["voluntary_switches"].get<std::uint64_t>() <= 2);
  }
  CHECK(engine_rows == 5);  // call and ring, ECHO and BACKTEST; and journaled APPENDs
}

TEST_CASE("the syscall counter sees every read and write of the socket server's thread") {
  // The counter must be able to see syscalls, or the zero of the first test proves nothing. A
  // socket round trip needs at least a read and a write on the server thread, whatever the
  // host's timing (a block-mode engine's futex calls, used here before, depend on whether the
  // client fell asleep before the answer came, which a fast core pair decides otherwise).
  ipcfloor::HygieneOptions options;
  options.binary = IPCFLOOR_BINARY;
  options.echo_requests = 2'000;
  options.backtest_requests = 200;
  options.socket_traced_requests = 1'000;
  options.socket_requests = 2'000;
  options.memory_touch_bytes = 4 << 20;
  auto report = ipcfloor::run_hygiene(options);
  REQUIRE_MESSAGE(report.has_value(), (report ? "" : report.error().message));
  bool seen = false;
  for (const auto& row : (*report)["results"]) {
    if (row["side"] != "socket server thread") continue;
    CAPTURE(row.dump());
    seen = true;
    CHECK(row["syscalls"].get<std::uint64_t>() >= 2 * row["traced_requests"].get<std::uint64_t>());
  }
  CHECK(seen);
}
