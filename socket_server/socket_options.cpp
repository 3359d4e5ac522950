#include "socket_server/socket_options.hpp"

#include <fmt/format.h>

namespace ipcfloor {

std::uint64_t SocketServerStats::total_served() const noexcept {
  std::uint64_t sum = 0;
  for (const auto n : served) sum += n;
  return sum;
}

std::uint64_t SocketServerStats::total_rejected() const noexcept {
  std::uint64_t sum = 0;
  for (const auto n : rejected) sum += n;
  return sum;
}

std::string format_stats(const SocketServerStats& stats) {
  std::string served;
  for (std::size_t i = 0; i < kSocketOpcodeCount; ++i)
    if (stats.served[i] > 0)
      served += fmt::format("{}{} {}", served.empty() ? "" : ", ", to_string(static_cast<SocketOpcode>(i)), stats.served[i]);
  std::string rejected;
  for (std::size_t i = 1; i < kSocketErrorSlots; ++i)
    if (stats.rejected[i] > 0)
      rejected += fmt::format("{}{} {}", rejected.empty() ? "" : ", ", to_string(static_cast<SocketError>(i)),
                              stats.rejected[i]);
  return fmt::format("{} connections; served {} frames{}; rejected {}{}; {} dropped, {} refused; {} bytes in, {} out",
                     stats.connections_accepted, stats.total_served(), served.empty() ? "" : " (" + served + ")",
                     stats.total_rejected(), rejected.empty() ? "" : " (" + rejected + ")", stats.connections_dropped,
                     stats.connections_refused, stats.bytes_in, stats.bytes_out);
}

}  // namespace ipcfloor
