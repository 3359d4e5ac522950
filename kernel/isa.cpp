#include "kernel/isa.hpp"

#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

#include "kernel/path.hpp"

namespace ipcfloor {
namespace {

const kernel_path::Path& path_of(KernelIsa isa) noexcept {
  switch (isa) {
    case KernelIsa::avx512: return kernel_path::kAvx512;
    case KernelIsa::avx2: return kernel_path::kAvx2;
    case KernelIsa::scalar: break;
  }
  return kernel_path::kScalar;
}

KernelIsa best_supported() noexcept {
  if (cpu_supports(KernelIsa::avx512)) return KernelIsa::avx512;
  if (cpu_supports(KernelIsa::avx2)) return KernelIsa::avx2;
  return KernelIsa::scalar;
}

// Until something selects a path, the kernel's first call of any function picks the best the CPU
// supports (the kResolving stubs), so the kernel is never without a path the CPU can run, with no
// static initialiser to order and no guard on the hot path. kUnresolved: nothing picked yet.
constexpr int kUnresolved = -1;
constinit std::atomic<int> g_isa{kUnresolved};
extern const kernel_path::Path kResolving;
constinit std::atomic<const kernel_path::Path*> g_path{&kResolving};

void store_active(KernelIsa isa) noexcept {
  // relaxed, both: set during setup, before the threads that run the kernel start (creating them
  // orders these stores before their loads), or by the first call, where every racing thread
  // stores the same values.
  g_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  g_path.store(&path_of(isa), std::memory_order_relaxed);
}

const kernel_path::Path& resolve() noexcept {
  store_active(best_supported());
  return path_of(best_supported());
}

constinit const kernel_path::Path kResolving{
    [](const double* x, std::size_t len, std::size_t n, double* out) noexcept { resolve().wma(x, len, n, out); },
    [](const double* fast, const double* slow, std::size_t len, double* out) noexcept {
      resolve().hma_input(fast, slow, len, out);
    },
    [](const double* a, const double* b, const double* c, std::size_t len, double* out) noexcept {
      resolve().hma3_input(a, b, c, len, out);
    },
    [](const double* close, const double* hma, const double* hma3, std::size_t len, double fee,
       const ipcfloor_trade_sink* sink) noexcept {
      return resolve().stop_and_reverse(close, hma, hma3, len, fee, sink);
    },
};

std::string supported_text() {
  std::string text;
  for (const KernelIsa isa : supported_kernel_isas()) {
    if (!text.empty()) text += ", ";
    text += to_string(isa);
  }
  return text;
}

}  // namespace

std::string_view to_string(KernelIsa isa) noexcept {
  switch (isa) {
    case KernelIsa::avx512: return "avx512";
    case KernelIsa::avx2: return "avx2";
    case KernelIsa::scalar: break;
  }
  return "scalar";
}

bool cpu_supports(KernelIsa isa) noexcept {
  // libgcc's CPUID probe also checks XCR0, so "supported" means the OS saves the registers too.
  __builtin_cpu_init();
  switch (isa) {
    case KernelIsa::avx512: return __builtin_cpu_supports("avx512f") != 0;
    case KernelIsa::avx2: return __builtin_cpu_supports("avx2") != 0;
    case KernelIsa::scalar: break;
  }
  return true;
}

std::vector<KernelIsa> supported_kernel_isas() {
  std::vector<KernelIsa> isas;
  for (const KernelIsa isa : {KernelIsa::avx512, KernelIsa::avx2, KernelIsa::scalar})
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

KernelIsa active_kernel_isa() noexcept {
  // relaxed: pairs with the relaxed store in store_active; a report, the kernel loads g_path.
  const int isa = g_isa.load(std::memory_order_relaxed);
  if (isa != kUnresolved) return static_cast<KernelIsa>(isa);
  store_active(best_supported());
  return best_supported();
}

Expected<void> set_kernel_isa(KernelIsa isa) {
  if (!cpu_supports(isa))
    return fail(ErrorCode::invalid_argument, "this CPU cannot run the {} kernel path (it supports: {})", to_string(isa),
                supported_text());
  store_active(isa);
  return {};
}

Expected<KernelIsa> select_kernel_isa() {
  const char* forced = std::getenv("IPCFLOOR_ISA");
  if (forced == nullptr || *forced == '\0') {
    const KernelIsa best = best_supported();
    if (auto set = set_kernel_isa(best); !set) return std::unexpected(std::move(set.error()));
    return best;
  }
  const std::string_view name = forced;
  for (const KernelIsa isa : {KernelIsa::avx512, KernelIsa::avx2, KernelIsa::scalar}) {
    if (name != to_string(isa)) continue;
    if (!cpu_supports(isa))
      return fail(ErrorCode::invalid_argument, "IPCFLOOR_ISA={}: this CPU cannot run that kernel path (it supports: {})",
                  name, supported_text());
    if (auto set = set_kernel_isa(isa); !set) return std::unexpected(std::move(set.error()));
    return isa;
  }
  return fail(ErrorCode::invalid_argument, "IPCFLOOR_ISA='{}' is not one of avx512, avx2, scalar (this CPU supports: {})",
              name, supported_text());
}

namespace kernel_path {

const Path& active_path() noexcept {
  // relaxed: pairs with the relaxed store in store_active, ordered by thread creation.
  return *g_path.load(std::memory_order_relaxed);
}

}  // namespace kernel_path
}  // namespace ipcfloor
