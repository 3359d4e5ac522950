#include "bench/memory_bench.hpp"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/latency.hpp"
#include "common/affinity.hpp"
#include "data/gbm.hpp"
#include "shm/huge_pages.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {
namespace {

constexpr std::size_t kPatternBytes = std::size_t{64} << 20;
constexpr int kWarmupScans = 3;

// The two kinds of memory the segment can be made of: memfds on 4 KiB shmem pages or on 2 MiB
// huge pages (MFD_HUGETLB), exactly as shm/shared_object.cpp makes them.
struct Pool {
  Backing backing;
  std::size_t page_bytes;
};

class ScratchFd {
 public:
  explicit ScratchFd(int fd) noexcept : fd_(fd) {}
  ScratchFd(ScratchFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScratchFd(const ScratchFd&) = delete;
  ScratchFd& operator=(const ScratchFd&) = delete;
  ScratchFd& operator=(ScratchFd&&) = delete;
  ~ScratchFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

class ScratchMapping {
 public:
  ScratchMapping(void* address, std::size_t bytes) noexcept : address_(address), bytes_(bytes) {}
  ScratchMapping(ScratchMapping&& other) noexcept
      : address_(std::exchange(other.address_, MAP_FAILED)), bytes_(other.bytes_) {}
  ScratchMapping(const ScratchMapping&) = delete;
  ScratchMapping& operator=(const ScratchMapping&) = delete;
  ScratchMapping& operator=(ScratchMapping&&) = delete;
  ~ScratchMapping() {
    if (address_ != MAP_FAILED) ::munmap(address_, bytes_);
  }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(address_); }

 private:
  void* address_;
  std::size_t bytes_;
};

// Why `pool` cannot hold `bytes` now, or nothing. The huge page pool must be checked up front:
// without posix_fallocate its pages are taken at the first write, and a short pool shows up as a
// SIGBUS inside the touch loop.
std::optional<std::string> shortfall(const Pool& pool, std::size_t bytes) {
  if (pool.backing == Backing::memfd_huge_2m) {
    const std::uint64_t need = bytes / pool.page_bytes;
    const HugePageBudget budget = huge_page_budget();
    const std::uint64_t have = budget.available;
    const std::uint64_t total = budget.total;
    if (have < need) {
      return fmt::format("needs {} free 2 MiB huge pages, {} are free and unreserved (HugePages_Free); "
                         "echo {} > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
                         need, have, total + need - have);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// A memfd of `bytes` in `pool`: it lives only as long as the descriptor and any mapping of it, so
// no path out of the benchmark can leave it behind. No posix_fallocate: that would allocate (and
// zero) every page now, which is exactly the cost the first-touch row times.
Expected<ScratchFd> open_scratch(const Pool& pool, std::size_t bytes) {
  const unsigned flags = MFD_CLOEXEC | (pool.backing == Backing::memfd_huge_2m ? MFD_HUGETLB | MFD_HUGE_2MB : 0U);
  ScratchFd fd(::memfd_create("ipcfloor-memory-bench", flags));
  if (fd.get() < 0) return fail(ErrorCode::io, "memfd_create for the memory bench failed: {}", std::strerror(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return fail(ErrorCode::io, "cannot size a scratch memfd to {} bytes: {}", bytes, std::strerror(errno));
  return fd;
}

// Maps `fd`; *map_ticks gets the TSC ticks of the mmap call alone. ENOMEM on huge pages means the
// huge pages could not be reserved (another process took them since shortfall() looked): resource.
Expected<ScratchMapping> map_scratch(const Pool& pool, const ScratchFd& fd, std::size_t bytes, bool populate,
                                     std::uint64_t* map_ticks = nullptr) {
  const int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  const std::uint64_t t0 = TscClock::now();
  void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, fd.get(), 0);
  const std::uint64_t t1 = TscClock::now();
  if (address == MAP_FAILED) {
    const int error = errno;
    return fail(error == ENOMEM && pool.backing == Backing::memfd_huge_2m ? ErrorCode::resource : ErrorCode::io,
                "cannot map {} bytes on {}: {}", bytes, backing_name(pool.backing), std::strerror(error));
  }
  if (map_ticks != nullptr) *map_ticks = t1 - t0;
  return ScratchMapping(address, bytes);
}

std::uint64_t minor_faults_of_this_thread() {
  struct rusage usage {};
  ::getrusage(RUSAGE_THREAD, &usage);
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

Expected<nlohmann::json> measure_first_touch(const Pool& pool, std::size_t bytes, bool prefault, const TscClock& clock) {
  auto fd = open_scratch(pool, bytes);
  if (!fd) return std::unexpected(fd.error());
  std::uint64_t map_ticks = 0;
  auto mapping = map_scratch(pool, *fd, bytes, prefault, &map_ticks);
  if (!mapping) return std::unexpected(mapping.error());

  // Sized (and so written) before the loop, so its own first touches stay out of the count.
  const std::size_t pages = bytes / pool.page_bytes;
  std::vector<std::uint64_t> ticks(pages);
  volatile std::byte* base = mapping->data();
  const std::uint64_t faults_before = minor_faults_of_this_thread();
  for (std::size_t i = 0; i < pages; ++i) {
    const std::uint64_t t0 = TscClock::now();
    base[i * pool.page_bytes] = std::byte{1};
    const std::uint64_t t1 = TscClock::now();
    ticks[i] = t1 - t0;
  }
  const std::uint64_t faults = minor_faults_of_this_thread() - faults_before;

  std::vector<double> ns(pages);
  double total = 0;
  for (std::size_t i = 0; i < pages; ++i) total += ns[i] = clock.to_ns(ticks[i]);
  const LatencySummary s = summarize("first touch", "one-way", ns);

  // The same writes again: the floor a first write is compared against. Where it stays far below
  // a prefaulted first write that counted no fault, the first access paid for something below
  // the guest kernel (a hypervisor building its shadow or nested page tables).
  for (std::size_t i = 0; i < pages; ++i) {
    const std::uint64_t t0 = TscClock::now();
    base[i * pool.page_bytes] = std::byte{2};
    const std::uint64_t t1 = TscClock::now();
    ns[i] = clock.to_ns(t1 - t0);
  }
  const LatencySummary again = summarize("second write", "one-way", ns);
  return nlohmann::json{
      {"backing", backing_name(pool.backing)},
      {"prefault", prefault},
      {"bytes", bytes},
      {"page_bytes", pool.page_bytes},
      {"map_ns", clock.to_ns(map_ticks)},
      {"touch_p50_ns", s.p50},
      {"touch_p99_ns", s.p99},
      {"touch_max_ns", s.max},
      {"touch_total_ns", total},
      {"minor_faults", faults},
      {"retouch_p50_ns", again.p50},
  };
}

// Four running sums, not one: a single chain of dependent adds runs at FP-add latency and
// scans 64 MiB at well under memory bandwidth, hiding whatever the TLB does; four are enough to
// make that scan memory-bound, so the page size can show. The order of the adds is fixed, and the function is never inlined into
// a caller that could compile it differently, so the sum is bit-identical wherever the doubles live.
[[gnu::noinline]] double scan_sum(const double* data, std::size_t count) noexcept {
  double a = 0, b = 0, c = 0, d = 0;
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    a += data[i];
    b += data[i + 1];
    c += data[i + 2];
    d += data[i + 3];
  }
  for (; i < count; ++i) a += data[i];
  return (a + b) + (c + d);
}

// Every scan's sum goes here, so no scan is dead code.
volatile double g_scan_sink = 0;

// Fills a fresh prefaulted mapping in `pool` with `count` doubles through `fill`, then times
// `samples` full scans, each on its own, after kWarmupScans untimed ones.
template <class Fill>
Expected<nlohmann::json> measure_scan(const Pool& pool, const std::string& what, std::size_t count, Fill&& fill,
                                      std::size_t samples, const TscClock& clock) {
  const std::size_t bytes = count * sizeof(double);
  const std::size_t mapped = round_up(bytes, pool.page_bytes);
  auto fd = open_scratch(pool, mapped);
  if (!fd) return std::unexpected(fd.error());
  auto mapping = map_scratch(pool, *fd, mapped, true);
  if (!mapping) return std::unexpected(mapping.error());
  auto* data = reinterpret_cast<double*>(mapping->data());
  fill(data, count);

  const double checksum = scan_sum(data, count);
  for (int i = 0; i < kWarmupScans; ++i) g_scan_sink = scan_sum(data, count);
  std::vector<double> ns(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    const std::uint64_t t0 = TscClock::now();
    const double sum = scan_sum(data, count);
    const std::uint64_t t1 = TscClock::now();
    ns[i] = clock.to_ns(t1 - t0);
    g_scan_sink = sum;
    if (std::bit_cast<std::uint64_t>(sum) != std::bit_cast<std::uint64_t>(checksum))
      return fail(ErrorCode::bad_data, "scan {} of {} on {} summed to {}, the first scan to {}", i, what,
                  backing_name(pool.backing), sum, checksum);
  }
  const LatencySummary s = summarize("scan", "one-way", ns);
  return nlohmann::json{
      {"backing", backing_name(pool.backing)},
      {"what", what},
      {"bytes", bytes},
      {"p50_ns", s.p50},
      {"p99_ns", s.p99},
      {"min_ns", s.min},
      {"samples", s.samples},
      {"checksum", checksum},
  };
}

nlohmann::json skipped_row(std::string what, std::string reason) {
  return nlohmann::json{{"what", std::move(what)}, {"reason", std::move(reason)}};
}

}  // namespace

Expected<nlohmann::json> run_memory_bench(const MemoryBenchOptions& options) {
  if (options.touch_bytes == 0) return fail(ErrorCode::invalid_argument, "memory bench: touch_bytes must be > 0");
  if (options.scan_samples == 0) return fail(ErrorCode::invalid_argument, "memory bench: scan_samples must be > 0");
  if (options.cpu >= 0)
    if (auto pinned = pin_current_thread(options.cpu); !pinned) return std::unexpected(pinned.error());
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  const TscClock clock = TscClock::calibrate();

  nlohmann::json first_touch = nlohmann::json::array();
  nlohmann::json scan = nlohmann::json::array();
  nlohmann::json skipped = nlohmann::json::array();

  const std::vector<Pool> pools{Pool{Backing::memfd_4k, kSmallPageBytes}, Pool{Backing::memfd_huge_2m, kHugePageBytes}};

  // A row the host cannot back is skipped, never failed: the suite must run with and without
  // huge pages. Only a lost race for huge pages (resource) is forgiven after the check.
  const auto run_row = [&](const Pool& pool, std::size_t bytes, const std::string& what, nlohmann::json& rows,
                           auto&& measure) -> Expected<bool> {
    if (auto reason = shortfall(pool, bytes)) {
      skipped.push_back(skipped_row(what, std::move(*reason)));
      return false;
    }
    Expected<nlohmann::json> row = measure();
    if (!row) {
      if (row.error().code != ErrorCode::resource) return std::unexpected(row.error());
      skipped.push_back(skipped_row(what, row.error().message));
      return false;
    }
    rows.push_back(std::move(*row));
    return true;
  };

  for (const Pool& pool : pools) {
    const std::size_t bytes = round_up(options.touch_bytes, pool.page_bytes);
    for (const bool prefault : {false, true}) {
      const std::string what = fmt::format("first touch, {} MiB on {}, prefault {}", bytes >> 20,
                                           backing_name(pool.backing), prefault ? "on" : "off");
      auto done = run_row(pool, bytes, what, first_touch,
                          [&] { return measure_first_touch(pool, bytes, prefault, clock); });
      if (!done) return std::unexpected(done.error());
    }
  }

  // The pattern: multiples of 2^-24 below 1, so the 8 Mi-double sum is exact and any changed
  // value changes it.
  const auto fill_pattern = [](double* out, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
      out[i] = static_cast<double>((i * 0x9E3779B97F4A7C15ull) >> 40) * 0x1p-24;
  };
  const auto fill_series = [&](double* out, std::size_t count) { std::memcpy(out, series->data(), count * sizeof(double)); };
  struct ScanSet {
    std::string what;
    std::size_t count;
    bool pattern;
  };
  const ScanSet sets[] = {{fmt::format("series ({} f64)", series->size()), series->size(), false},
                          {fmt::format("{} MiB", kPatternBytes >> 20), kPatternBytes / sizeof(double), true}};
  for (const ScanSet& set : sets) {
    std::optional<double> reference;
    std::string reference_backing;
    for (const Pool& pool : pools) {
      const std::size_t mapped = round_up(set.count * sizeof(double), pool.page_bytes);
      const std::string what = fmt::format("scan of {} on {}", set.what, backing_name(pool.backing));
      auto done = run_row(pool, mapped, what, scan, [&] {
        return set.pattern ? measure_scan(pool, set.what, set.count, fill_pattern, options.scan_samples, clock)
                           : measure_scan(pool, set.what, set.count, fill_series, options.scan_samples, clock);
      });
      if (!done) return std::unexpected(done.error());
      if (!*done) continue;
      const double checksum = scan.back()["checksum"].get<double>();
      if (!reference) {
        reference = checksum;
        reference_backing = backing_name(pool.backing);
      } else if (std::bit_cast<std::uint64_t>(checksum) != std::bit_cast<std::uint64_t>(*reference)) {
        return fail(ErrorCode::bad_data, "scan of {}: {} sums to {:a}, {} to {:a}; the same doubles must give the same bits",
                    set.what, backing_name(pool.backing), checksum, reference_backing, *reference);
      }
    }
  }

  return nlohmann::json{
      {"suite", "memory"},
      {"config",
       {{"cpu", options.cpu},
        {"touch_bytes", options.touch_bytes},
        {"scan_samples", options.scan_samples},
        {"warmup_scans", kWarmupScans},
        {"tsc_ghz", clock.ghz()},
        {"method", "TSC time per sample (one page's first write, one full scan); faults: getrusage(RUSAGE_THREAD) "
                   "ru_minflt around the touch loop; no hardware counters"}}},
      {"first_touch", first_touch},
      {"scan", scan},
      {"skipped", skipped},
  };
}

void print_memory_bench(const nlohmann::json& report) {
  fmt::print("memory: first write to each page, each write timed on its own\n");
  fmt::print("  {:<13} {:<8} {:>7} {:>5} {:>10} {:>9} {:>9} {:>10} {:>10} {:>7} {:>11}\n", "backing", "prefault", "MiB",
             "page", "mmap us", "p50 ns", "p99 ns", "max ns", "total us", "faults", "2nd p50 ns");
  for (const auto& r : report["first_touch"]) {
    const auto page = r["page_bytes"].get<std::size_t>();
    fmt::print("  {:<13} {:<8} {:>7.1f} {:>5} {:>10.1f} {:>9.0f} {:>9.0f} {:>10.0f} {:>10.1f} {:>7} {:>11.0f}\n",
               r["backing"].get<std::string>(), r["prefault"].get<bool>() ? "yes" : "no",
               r["bytes"].get<double>() / (1 << 20), page >= (1u << 20) ? fmt::format("{}M", page >> 20) : fmt::format("{}K", page >> 10),
               r["map_ns"].get<double>() / 1e3, r["touch_p50_ns"].get<double>(), r["touch_p99_ns"].get<double>(),
               r["touch_max_ns"].get<double>(), r["touch_total_ns"].get<double>() / 1e3, r["minor_faults"].get<std::uint64_t>(),
               r["retouch_p50_ns"].get<double>());
  }
  fmt::print("memory: full scans (sum of doubles), each scan timed on its own\n");
  fmt::print("  {:<13} {:<20} {:>10} {:>10} {:>10} {:>8} {:>22}\n", "backing", "what", "min us", "p50 us", "p99 us",
             "samples", "checksum");
  for (const auto& r : report["scan"])
    fmt::print("  {:<13} {:<20} {:>10.1f} {:>10.1f} {:>10.1f} {:>8} {:>22.17g}\n", r["backing"].get<std::string>(),
               r["what"].get<std::string>(), r["min_ns"].get<double>() / 1e3, r["p50_ns"].get<double>() / 1e3,
               r["p99_ns"].get<double>() / 1e3, r["samples"].get<std::size_t>(), r["checksum"].get<double>());
  for (const auto& s : report["skipped"])
    fmt::print("  skipped: {}: {}\n", s["what"].get<std::string>(), s["reason"].get<std::string>());
}

}  // namespace ipcfloor
