#pragma once
// What an HTTP port of the engine (`serve --metrics`) reads of a request before anything serves
// it: the request head, bounded in bytes, and one verdict on it. Only GET and HEAD without a body
// pass; everything else is answered with a status code and the connection closed, so that no
// peer can make the engine read or keep more than kMaxRequestHead bytes of it.
//
// A pure parser: no I/O, no allocation, noexcept, never reads outside the view it is given
// (tests/fuzz/fuzz_metrics_request.cpp feeds it arbitrary bytes).

#include <cstddef>
#include <string_view>

namespace ipcfloor {

// The most a request head (request line, headers and the blank line) may take. Prometheus's
// scrape head is about 250 bytes.
inline constexpr std::size_t kMaxRequestHead = 4096;

// Where a head ends in the bytes received so far.
struct HeadEnd {
  enum class State : unsigned char { incomplete, complete, too_large };
  State state = State::incomplete;
  std::size_t length = 0;  // complete: the head's bytes, its blank line included
};
// complete once a line ending is followed by an empty line (CRLF CRLF, or bare LFs as RFC 9112
// lets a recipient accept); too_large when kMaxRequestHead bytes hold no end.
[[nodiscard]] HeadEnd find_head_end(std::string_view received) noexcept;

// The verdict on one complete head.
struct HeadVerdict {
  int status = 0;              // 0: serve it; else the HTTP status to answer with, then close
  std::string_view reason;     // why, for the answer's body (static text)
  bool head_only = false;      // a HEAD request (served without a body)
  std::string_view target;     // the request target as sent (a view into the head)
};
// 400 for a malformed request line or header (no method, target or version; a control byte; a
// header without a colon, a space before the colon or a folded line; a line that does not end with
// CRLF; a Content-Length that is not one decimal number, or two that differ); 405 for any method but GET and HEAD; 413 for a body
// (a Content-Length above 0, or any Transfer-Encoding): none is read; 505 for a version other
// than HTTP/1.0 and HTTP/1.1. Which target is served is the server's business.
[[nodiscard]] HeadVerdict judge_request_head(std::string_view head) noexcept;

}  // namespace ipcfloor
