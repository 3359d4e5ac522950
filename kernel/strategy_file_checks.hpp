#pragma once
// What the strategy loader (kernel/strategy_loader.hpp) checks of a strategy's file before any of
// its code runs, and the self-check's probes of its parameter bounds:
//
//   open_strategy_file    walks the path one component at a time, never following a link it has
//                         not checked: every folder passed through and every link followed must
//                         belong to this user or root, and no one else may write a folder unless
//                         it is sticky (sshd's StrictModes, applied to every link on the way).
//                         The file itself must be a regular file before it is opened (a FIFO or
//                         a device is refused from its lstat, and the open is O_NONBLOCK and
//                         O_NOFOLLOW, so nothing can hang it), ours or root's, writable by its
//                         owner only, and an ELF shared object.
//   find_exported_entry   reads the ELF's dynamic symbol table from the descriptor: the file must
//                         define one of the entry symbols as a function, or it is refused before
//                         dlopen runs any of its constructors.
//   check_parameter_bounds  probes each parameter with values no series can need (2^62, 2^31,
//                         INT64_MAX, -1, -5, INT64_MIN): a parameter whose accepted cost grows
//                         without limit (a larger magnitude accepted at a larger cost, or a cost
//                         that is not a finite number) is unbounded and refused, and so is one
//                         that accepts INT64_MIN or INT64_MAX.
//
// Every refusal is an Error of ErrorCode::strategy whose message starts "strategy ORIGIN: ".
// Threads: setup path only (file system, allocation).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "kernel/strategy.hpp"

namespace ipcfloor {

// The file `path` names, opened read-only through checked folders and links; `origin` names it in
// messages.
[[nodiscard]] Expected<UniqueFd> open_strategy_file(const std::string& path, const std::string& origin);

// The first of `entries` that the ELF file on `fd` defines as a function in its dynamic symbol
// table. Reads with pread; never maps or runs the file.
[[nodiscard]] Expected<std::string_view> find_exported_entry(int fd, std::span<const std::string_view> entries,
                                                             const std::string& origin);

// The self-check's bound probes of every parameter of `s` around `example`, on a series of `bars`.
// Runs the strategy's validate() and cost(), nothing else.
[[nodiscard]] Expected<void> check_parameter_bounds(const Strategy& s, const Combo& example, std::uint64_t bars,
                                                    const std::string& origin);

}  // namespace ipcfloor
