#pragma once
// The one percentile every `ipcfloor bench` figure uses: the nearest rank. The p-th percentile of
// n samples is the smallest sample with at least p% of all samples at or below it, i.e. the
// sample of rank ceil(p/100 * n) in ascending order (rank 1 for p = 0). It is always one of the
// samples (never an average of two), p = 0 is the minimum and p = 100 the maximum, and it is what
// HdrHistogram reports, so a row of a table, its .hgrm file and its Google Benchmark entry agree.
// docs/RESULTS.md ("How figures are taken") says why this definition and not another.
//
// Pure functions: no allocation except where a copy is named, any thread.

#include <cstddef>
#include <span>
#include <vector>

namespace ipcfloor {

// The 0-based index, in ascending order, of the p-th percentile of `count` samples (`percent` in
// [0, 100]; outside it is clamped). `count` must be > 0. This is the definition; the functions
// below only read the sample at this index.
[[nodiscard]] std::size_t percentile_index(std::size_t count, double percent) noexcept;

// The p-th percentile of samples already sorted ascending; 0 when there are none.
[[nodiscard]] double sorted_percentile(std::span<const double> sorted, double percent) noexcept;

// The same for samples in any order: sorts a copy (allocates it).
[[nodiscard]] double percentile(std::vector<double> samples, double percent);

}  // namespace ipcfloor
