#pragma once
// Ctrl-C and SIGTERM for long commands (sweep, walkforward): the first signal sets a flag the
// command's loops ask between combos, so what was computed is written and flushed, and the
// command exits 130 saying how many rows it wrote. A second signal ends the process at once
// (the default action), for a command stuck in something that cannot be asked.
//
// Threads: install() from the main thread before the work starts; requested() from any.

#include <atomic>

namespace ipcfloor {

class Interrupt {
 public:
  // Catches SIGINT and SIGTERM (once each: the handler restores the default after the first).
  static void install() noexcept;
  // True once a signal came. One relaxed load.
  [[nodiscard]] static bool requested() noexcept;
  // For ShmClient::set_interrupt: nonzero once a signal came.
  static int check(void*) noexcept { return requested() ? 1 : 0; }
  // The exit code of a command a signal stopped: 128 + SIGINT.
  static constexpr int kExitCode = 130;
};

}  // namespace ipcfloor
