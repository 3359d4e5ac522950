#pragma once
// The setup-path error type. Setup functions return std::expected<T, Error>; the hot path
// never builds one (it returns plain status codes instead), because an Error owns a string.

#include <expected>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {

enum class ErrorCode {
  invalid_argument,   // a caller-supplied value is outside what the contract allows
  bad_data,           // a series file is malformed or holds a bad bar
  io,                 // the OS refused a file, socket or mapping operation
  resource,           // huge pages, memlock, /dev/shm space: the host lacks something
  permission,         // owner or mode of a shared object is not ours
  version_mismatch,   // the segment was built by another layout version
  peer_gone,          // the engine or client on the other side is dead
  timeout,            // a bounded wait ran out
  busy,               // no free lane, or the name is held by a live engine
  protocol,           // a frame broke the wire protocol
  strategy,           // a strategy could not be loaded, failed its checks or failed a backtest
};

struct Error {
  ErrorCode code;
  std::string message;  // a full sentence a user can act on, naming the bad thing
};

template <class T>
using Expected = std::expected<T, Error>;

// Builds an unexpected Error with a fmt-formatted message.
template <class... Args>
[[nodiscard]] std::unexpected<Error> fail(ErrorCode code, fmt::format_string<Args...> format,
                                          Args&&... args) {
  return std::unexpected(Error{code, fmt::format(format, std::forward<Args>(args)...)});
}

}  // namespace ipcfloor
