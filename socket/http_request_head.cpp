#include "socket/http_request_head.hpp"

#include <algorithm>
#include <cstdint>

namespace ipcfloor {
namespace {

HeadVerdict refuse(int status, std::string_view reason) noexcept { return HeadVerdict{status, reason, false, {}}; }

// RFC 9110's tchar: the bytes a method or a header name is made of.
bool token_char(char c) noexcept {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool token(std::string_view text) noexcept { return !text.empty() && std::ranges::all_of(text, token_char); }

// A header value may hold visible bytes, spaces and tabs (and obs-text, bytes >= 0x80).
bool value_char(char c) noexcept {
  const auto byte = static_cast<unsigned char>(c);
  return byte == '\t' || (byte >= 0x20 && byte != 0x7f);
}

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::ranges::equal(a, b, [](char x, char y) {
           const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
           return lower(x) == lower(y);
         });
}

std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// The next line of `rest` without its CRLF, advancing `rest` past it; `bare` turns true when a line
// ends with a line feed alone.
std::string_view next_line(std::string_view& rest, bool& bare) noexcept {
  const std::size_t end = rest.find('\n');
  std::string_view line = rest.substr(0, end);
  rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  } else {
    bare = true;
  }
  return line;
}

// A Content-Length value: decimal digits only (a number past 18 digits counts as INT64_MAX). -1
// when it is not one number.
std::int64_t content_length(std::string_view value) noexcept {
  if (value.empty() || !std::ranges::all_of(value, [](char c) { return c >= '0' && c <= '9'; })) return -1;
  if (value.size() > 18) return INT64_MAX;
  std::int64_t length = 0;
  for (const char c : value) length = length * 10 + (c - '0');
  return length;
}

}  // namespace

HeadEnd find_head_end(std::string_view received) noexcept {
  const std::string_view window = received.substr(0, kMaxRequestHead);
  // The blank line: a line feed followed by an optional carriage return and a line feed. A head
  // that starts with a blank line has no request line; the verdict will say so.
  for (std::size_t at = window.find('\n'); at != std::string_view::npos; at = window.find('\n', at + 1)) {
    if (at + 1 < window.size() && window[at + 1] == '\n') return {HeadEnd::State::complete, at + 2};
    if (at + 2 < window.size() && window[at + 1] == '\r' && window[at + 2] == '\n')
      return {HeadEnd::State::complete, at + 3};
  }
  if (received.size() >= kMaxRequestHead) return {HeadEnd::State::too_large, 0};
  return {HeadEnd::State::incomplete, 0};
}

HeadVerdict judge_request_head(std::string_view head) noexcept {
  if (head.size() > kMaxRequestHead) return refuse(431, "the request head is larger than the server reads");
  std::string_view rest = head;
  bool bare = false;
  const std::string_view request_line = next_line(rest, bare);
  // method SP target SP version, each part without spaces.
  const std::size_t first = request_line.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : request_line.find(' ', first + 1);
  if (second == std::string_view::npos || request_line.find(' ', second + 1) != std::string_view::npos)
    return refuse(400, "the request line is not METHOD TARGET VERSION");
  const std::string_view method = request_line.substr(0, first);
  const std::string_view target = request_line.substr(first + 1, second - first - 1);
  const std::string_view version = request_line.substr(second + 1);
  if (!token(method)) return refuse(400, "the method is not a token");
  if (target.empty() || !std::ranges::all_of(target, [](char c) { return c > 0x20 && c < 0x7f; }))
    return refuse(400, "the request target is empty or holds a space or a control byte");
  if (version.size() != 8 || !version.starts_with("HTTP/1.")) return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  if (version[7] != '0' && version[7] != '1') return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  std::int64_t length = -2;  // none seen
  bool chunked = false;
  for (std::string_view line = next_line(rest, bare); !line.empty(); line = next_line(rest, bare)) {
    if (line.front() == ' ' || line.front() == '\t') return refuse(400, "a folded header line");
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || !token(line.substr(0, colon)))
      return refuse(400, "a header line without a name and a colon");
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (!std::ranges::all_of(value, value_char)) return refuse(400, "a header value holds a control byte");
    if (equals_ignoring_case(name, "transfer-encoding")) chunked = true;
    if (equals_ignoring_case(name, "content-length")) {
      const std::int64_t this_length = content_length(value);
      if (this_length < 0 || (length >= 0 && this_length != length))
        return refuse(400, "Content-Length is not one decimal number");
      length = this_length;
    }
  }
  if (!rest.empty()) return refuse(400, "bytes after the head's blank line");
  if (bare) return refuse(400, "a line of the head ends without CRLF");
  const bool get = method == "GET";
  const bool head_request = method == "HEAD";
  if (!get && !head_request) return refuse(405, "only GET and HEAD are served");
  if (chunked || length > 0) return refuse(413, "a request body is not accepted");
  return HeadVerdict{0, "", head_request, target};
}

}  // namespace ipcfloor
