#pragma once
// The memory choices of the second seed, measured (part of `ipcfloor bench hygiene`): what the
// first write to each page costs with and without prefaulting (MAP_POPULATE), and how long a
// full scan of the series takes on 2 MiB pages against 4 KiB pages. The host has no hardware
// counters, so the evidence is TSC time per sample and getrusage fault counts.

#include <cstddef>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct MemoryBenchOptions {
  std::size_t touch_bytes = 64 << 20;   // region for the first-touch measurement
  std::size_t scan_samples = 200;       // full scans timed one by one, per page size
  int cpu = -1;                         // pin here (-1: leave as is)
};

// Runs every measurement on the calling thread, each backing in turn, and returns
//
//   {"suite":"memory", "config":{...},
//    "first_touch":[{"backing":"memfd_4k"|"memfd_huge_2m", "prefault", "bytes", "page_bytes",
//                    "map_ns", "touch_p50_ns", "touch_p99_ns", "touch_max_ns", "touch_total_ns",
//                    "minor_faults", "retouch_p50_ns"}],
//    "scan":[{"backing", "what", "bytes", "p50_ns", "p99_ns", "min_ns", "samples", "checksum"}],
//    "skipped":[{"what", "reason"}]}
//
// Each figure is a percentile over individually timed samples (one page's first write, one full
// scan), never a batch divided by a count. map_ns is the mmap call alone (it does the faulting
// when prefault is on); minor_faults is getrusage(RUSAGE_THREAD) around the touch loop;
// retouch_p50_ns is a second write to every page, the floor the first write is compared with.
// checksum is the sum of the scanned doubles, bit-identical on both backings. A backing the host
// cannot provide (too few free 2 MiB huge pages) becomes a "skipped" entry, not an error.
//
// Setup path: allocates freely, maps up to max(touch_bytes, 64 MiB) at a time in scratch memfds
// (the segment's own kinds of memory) that are unmapped and closed before it returns, on every
// path. Takes 2 to 5 s with the defaults. Any thread may call it;
// with cpu >= 0 it pins the calling thread there and leaves it pinned.
//
// Fails with invalid_argument for touch_bytes or scan_samples of 0, io when a scratch file or
// mapping is refused, and bad_data when the two backings' checksums differ in any bit.
[[nodiscard]] Expected<nlohmann::json> run_memory_bench(const MemoryBenchOptions& options);

// Prints the report as two small tables (first touch, scan) and the skipped rows.
void print_memory_bench(const nlohmann::json& report);

}  // namespace ipcfloor
