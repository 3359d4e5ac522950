#pragma once
// What ipcfloor-mpi's ranks send each other, and the broadcasts that carry it. Every struct here
// travels as raw bytes between ranks of one build, so each is trivially copyable.

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/combo.hpp"

namespace ipcfloor::mpi {

inline constexpr int kRoot = 0;
inline constexpr int kTagResults = 1;  // a batch of ResultWire
inline constexpr int kTagDone = 2;     // a rank finished its share: the payload is its RankReport
inline constexpr int kTagFailed = 3;   // a rank failed: the payload is its message

// One plan row as rank 0 broadcasts it: its windows, and whether it can run at all (a bad line of
// a combo file cannot). O(combos) bytes, not O(series x combos).
struct RowWire {
  Combo params;
  std::uint64_t runnable;  // 0 or 1
};
static_assert(std::is_trivially_copyable_v<RowWire>, "RowWire travels as bytes");

// One runnable (series, combo). Every rank derives the same list from the broadcast rows and bar
// counts (build_items), so the list itself never travels.
struct Item {
  std::uint32_t series;  // index into the catalog of series (files, or the engine's table)
  std::uint32_t row;     // index into the plan's rows
  std::uint64_t cost;    // backtest_cost on the series' bars
};

struct ResultWire {
  std::uint64_t item;
  std::int64_t trades;
  double pnl;
  std::uint32_t status;  // a KernelStatus or Status value; 0 is ok
  std::uint32_t engine;  // 1: status is the engine's Status, 0: the kernel's
};
static_assert(std::is_trivially_copyable_v<ResultWire>, "ResultWire travels as bytes");

// What a rank did, for --timings: its share and how long computing it took.
struct RankReport {
  double seconds;
  std::uint64_t items;
  std::uint64_t cost;
};
static_assert(std::is_trivially_copyable_v<RankReport>, "RankReport travels as bytes");

[[nodiscard]] inline int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

[[nodiscard]] inline int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// Rank 0's `values` to every rank: the byte count first, then the bytes.
template <class T>
void broadcast_vector(std::vector<T>& values) {
  static_assert(std::is_trivially_copyable_v<T>, "a broadcast travels as bytes");
  std::uint64_t count = values.size();
  MPI_Bcast(&count, 1, MPI_UINT64_T, kRoot, MPI_COMM_WORLD);
  values.resize(count);
  if (count != 0)
    MPI_Bcast(values.data(), static_cast<int>(count * sizeof(T)), MPI_BYTE, kRoot, MPI_COMM_WORLD);
}

}  // namespace ipcfloor::mpi
