#pragma once
// Loading a researcher's strategy (include/ipcfloor/strategy.h) from a shared object, and the
// checks that come before the engine trusts it: the file, every folder above it and every link on
// its path (no one but its owner or root may write them, in the manner of sshd's StrictModes; a
// FIFO or device is refused before it is opened), the ELF type and the entry symbol in its dynamic
// symbols before dlopen (kernel/strategy_file_checks.hpp), the ABI version and size, the table's
// fields, and a self-check on a short generated series the caller gives (data/gbm.hpp's
// strategy_check_series(), the one every caller uses: the generator is data, above this layer),
// which also times run() against cost(). Every refusal is an Error of ErrorCode::strategy whose message names the file and the
// reason (exit code 6 on the command line).
//
// Threads: setup path only (dlopen, file system, allocation). A loaded table stays valid while
// its StrategyCatalog lives.

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "ipcfloor/strategy.h"
#include "kernel/sha256.hpp"
#include "kernel/strategy.hpp"

namespace ipcfloor {

// Checks a strategy table as the engine does at load: version and size, fields, then the
// self-check (docs in strategy.h) on `check_close` (at least 2 bars; the other columns are made
// from it). `origin` names where it came from in messages. Runs the strategy's code. A version-1
// table is checked by the same rules, trade reports aside.
[[nodiscard]] Expected<void> check_strategy(const ipcfloor_strategy& table, const std::string& origin,
                                            std::span<const double> check_close);
[[nodiscard]] Expected<void> check_strategy(const ipcfloor_strategy_v1& table, const std::string& origin,
                                            std::span<const double> check_close);

// The strategies one process serves: the built-in one and those it loaded, with the shared
// objects that hold them (kept loaded while the catalog lives).
class StrategyCatalog {
 public:
  StrategyCatalog() = default;
  StrategyCatalog(StrategyCatalog&&) noexcept = default;
  StrategyCatalog& operator=(StrategyCatalog&&) noexcept = default;
  ~StrategyCatalog();

  // Loads `path` and adds its strategy, or says why not (nothing is added then). The self-check
  // runs on `check_close` (check_strategy).
  [[nodiscard]] Expected<const Strategy*> load(const std::string& path, std::span<const double> check_close);
  // Adds a table the caller keeps alive (tests, embedders), after the same checks as load().
  [[nodiscard]] Expected<const Strategy*> add(const ipcfloor_strategy& table, const std::string& origin,
                                              std::span<const double> check_close);
  [[nodiscard]] Expected<const Strategy*> add(const ipcfloor_strategy_v1& table, const std::string& origin,
                                              std::span<const double> check_close);

  [[nodiscard]] const StrategySet& set() const noexcept { return set_; }
  // The file each strategy came from, by index ("" for the built-in and added tables).
  [[nodiscard]] const std::string& origin(std::size_t index) const noexcept { return origins_[index]; }
  // The SHA-256 of that file's bytes as loaded (all zero for the built-in and added tables):
  // results name the code that produced them by it.
  [[nodiscard]] const Sha256& digest(std::size_t index) const noexcept { return digests_[index]; }

 private:
  template <class Table>
  [[nodiscard]] Expected<const Strategy*> add_checked(const Table& table, const std::string& origin,
                                                      std::span<const double> check_close);
  // The table a loaded library's entry point (version 2, else 1) returns, checked and added.
  [[nodiscard]] Expected<const Strategy*> add_entry(void* handle, const std::string& path,
                                                    std::span<const double> check_close);

  struct Library {
    void* handle = nullptr;
    // The descriptor it was loaded through stays open while it is loaded: the loader knows a
    // library by the name it was opened under (/proc/self/fd/N), so a reused N would hand back
    // the library loaded before instead of the new file.
    UniqueFd fd;
  };
  StrategySet set_;
  std::vector<std::string> origins_{""};
  std::vector<Sha256> digests_{Sha256{}};
  std::vector<Library> libraries_;
};

}  // namespace ipcfloor
