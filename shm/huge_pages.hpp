#pragma once
// What the host offers in 2 MiB huge pages: how many pages its pool holds and how many are still
// free. The segment picks its backing from this (memfds with MFD_HUGETLB need no mount); the
// memory benchmark asks the same question, so both read the host the same way.
//
// Setup path: reads /proc and /sys, allocates. Safe from any thread.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ipcfloor {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

struct HugePageBudget {
  std::uint64_t total = 0;      // nr_hugepages of the 2 MiB pool
  std::uint64_t available = 0;  // free and not reserved by other mappings
};

// The 2 MiB pool from /sys/kernel/mm/hugepages (or /proc/meminfo when that is the default
// size); zeros when the host has no such pool.
[[nodiscard]] HugePageBudget huge_page_budget();

// The command that gives the pool room for `pages_needed` more pages beside what it holds now
// ("echo N > /proc/sys/vm/nr_hugepages", N at least 64): the one fix serve prints when it falls
// back to 4 KiB pages and doctor prints for the same shortfall.
[[nodiscard]] std::string huge_pages_fix(std::uint64_t pages_needed, const HugePageBudget& budget);

}  // namespace ipcfloor
