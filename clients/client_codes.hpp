#pragma once
// How the client library turns what happened into the C ABI's words: an IPCFLOOR_* code for an
// Error, a CallStatus or an engine's wire status, and a sentence written into a fixed buffer
// without allocating. Shared by the attached engine's calls (clients/attached_engine.cpp,
// clients/attached_requests.cpp) and their refusal messages.
//
// Threads: pure functions; any thread. Never allocate, never throw.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <fmt/format.h>

#include "clients/shm_client.hpp"
#include "common/error.hpp"
#include "ipcfloor/ipcfloor.h"
#include "shm/frames.hpp"

namespace ipcfloor {

[[nodiscard]] int code_for(ErrorCode code) noexcept;
[[nodiscard]] int code_for(CallStatus status) noexcept;
// An engine's answer status (Status): IPCFLOOR_E_REJECTED for one the C ABI has no code of.
[[nodiscard]] int code_for(std::uint16_t status) noexcept;

// Writes a sentence into a fixed buffer, cut to fit; formats in place, so it never allocates.
template <std::size_t N, class... Args>
void write_message_to(char (&buffer)[N], fmt::format_string<Args...> format, Args&&... args) noexcept {
  static_assert(N > 1);
  try {
    const auto end = fmt::format_to_n(buffer, N - 1, format, std::forward<Args>(args)...);
    buffer[std::min<std::size_t>(end.size, N - 1)] = '\0';
  } catch (...) {
    buffer[0] = '\0';
  }
}

// The name of an IPCFLOOR_COLUMN_* bit ("high"), or "a column" for anything else.
[[nodiscard]] const char* column_name(std::uint64_t bit) noexcept;

}  // namespace ipcfloor
