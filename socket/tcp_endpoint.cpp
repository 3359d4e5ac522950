#include "socket/tcp_endpoint.hpp"

#include <charconv>

namespace ipcfloor {

Expected<TcpEndpoint> parse_tcp_endpoint(std::string_view text) {
  if (text.empty()) return fail(ErrorCode::invalid_argument, "the tcp endpoint is empty; write HOST:PORT, e.g. 127.0.0.1:7878");
  std::string_view host;
  std::string_view port = text;
  if (text.front() == '[') {
    const auto close_bracket = text.find(']');
    if (close_bracket == std::string_view::npos || close_bracket + 1 >= text.size() || text[close_bracket + 1] != ':')
      return fail(ErrorCode::invalid_argument, "tcp endpoint '{}': write an IPv6 address as [ADDRESS]:PORT", text);
    host = text.substr(1, close_bracket - 1);
    port = text.substr(close_bracket + 2);
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return fail(ErrorCode::invalid_argument, "tcp endpoint '{}': write an IPv6 address as [ADDRESS]:PORT", text);
  }
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc{} || end != port.data() + port.size() || value > 65535)
    return fail(ErrorCode::invalid_argument, "tcp endpoint '{}': port '{}' is not a number in 0..65535", text, port);
  return TcpEndpoint{host.empty() ? std::string(kDefaultTcpHost) : std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace ipcfloor
