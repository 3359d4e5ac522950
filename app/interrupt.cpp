#include "app/interrupt.hpp"

#include <csignal>

namespace ipcfloor {
namespace {

// relaxed: a plain flag; what it stops publishes nothing through it.
std::atomic<bool> g_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

extern "C" void on_signal(int number) {
  g_requested.store(true, std::memory_order_relaxed);
  std::signal(number, SIG_DFL);  // a second one ends the process
}

}  // namespace

void Interrupt::install() noexcept {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking wait returns EINTR and asks the flag
  (void)sigaction(SIGINT, &action, nullptr);
  (void)sigaction(SIGTERM, &action, nullptr);
}

bool Interrupt::requested() noexcept { return g_requested.load(std::memory_order_relaxed); }

}  // namespace ipcfloor
