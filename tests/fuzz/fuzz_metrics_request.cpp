// fuzz-sources: socket/http_request_head.cpp
// fuzz-flags: -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
// fuzz-libs: -lcpp-httplib -lfmt
//
// libFuzzer harness for the metrics port's request parser (socket/http_request_head.hpp, the gate
// of app/metrics_gate.hpp): the input is what a hostile peer sends `serve --metrics`. It arrives in
// pieces (the first byte picks their size); the head is looked for after each piece, judged once
// whole, and a head the gate admits is answered by cpp-httplib's process_request, as the metrics
// server does, from memory. The first byte's top bit picks a mode: the bytes as they are, or a
// plausible head assembled from them (a method, a target, a version and headers from short lists,
// with values, line endings and folds from the input), so that the judging and answering paths
// are reached, not only the search for the blank line.
//
// Build and run every harness with tools/fuzz (see docs/RELIABILITY.md, "Fuzzing").
//
// Invariants (a violation traps, which libFuzzer records as a crash):
//   - find_head_end never reports a head longer than the bytes it was given or than
//     kMaxRequestHead, reports too_large only for kMaxRequestHead bytes without an end, and gives
//     the same end whether the bytes came in one piece or many (once complete, it stays so);
//   - the verdict is 0 or one of 400, 405, 413, 431, 505, with a reason exactly when refused; an
//     admitted head is GET or HEAD, carries no Transfer-Encoding and no Content-Length above 0,
//     and its target lies inside the head;
//   - cpp-httplib answers every admitted head with one status line and a complete header block,
//     and GET /metrics with 200 and exactly the exposition (HEAD: no body).

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "socket/http_request_head.hpp"

namespace {

using namespace ipcfloor;

constexpr std::string_view kExposition = "ipcfloor_up 1\n";

void require(bool condition) {
  if (!condition) __builtin_trap();
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

class Answers final : public httplib::Server {
 public:
  Answers() {
    set_payload_max_length(0);
    Get("/metrics", [](const httplib::Request&, httplib::Response& response) {
      response.set_content(std::string(kExposition), "text/plain; version=0.0.4; charset=utf-8");
    });
  }
  using httplib::Server::process_request;
};

// The gate's connection as cpp-httplib sees it: the head, then a buffer for the answer.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view head) : head_(head) {}
  bool is_readable() const override { return read_ < head_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, head_.size() - read_);
    std::memcpy(ptr, head_.data() + read_, n);
    read_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    written.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 1;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 2;
  }
  socket_t socket() const override { return -1; }
  std::string written;

 private:
  std::string_view head_;
  std::size_t read_ = 0;
};

void check_answer(std::string_view head, const HeadVerdict& verdict) {
  static Answers answers;
  MemoryStream stream(head);
  bool closed = false;
  (void)answers.process_request(stream, true, closed, nullptr);
  const std::string& out = stream.written;
  require(out.size() >= 12 && out.compare(0, 9, "HTTP/1.1 ") == 0);
  require(std::isdigit(static_cast<unsigned char>(out[9])) && std::isdigit(static_cast<unsigned char>(out[10])) &&
          std::isdigit(static_cast<unsigned char>(out[11])));
  const auto end = out.find("\r\n\r\n");
  require(end != std::string::npos);
  const std::string headers = lower(head);
  // Headers that change the answer on purpose: a range, 100-continue, a compressed body.
  const bool plain = verdict.target == "/metrics" && headers.find("\nrange") == std::string::npos &&
                     headers.find("\nexpect") == std::string::npos &&
                     headers.find("\naccept-encoding") == std::string::npos;
  if (!plain) return;
  require(out.compare(9, 3, "200") == 0);
  const std::string_view body = std::string_view(out).substr(end + 4);
  require(verdict.head_only ? body.empty() : body == kExposition);
}

// A head assembled from the input: parts from short lists, values from its bytes.
std::string plausible_head(std::string_view input) {
  const auto take = [&input]() -> unsigned {
    if (input.empty()) return 0;
    const auto byte = static_cast<unsigned char>(input.front());
    input.remove_prefix(1);
    return byte;
  };
  const auto text = [&](std::size_t most) {
    const std::size_t n = std::min<std::size_t>(take() % (most + 1), input.size());
    std::string out(input.substr(0, n));
    input.remove_prefix(n);
    return out;
  };
  static constexpr std::string_view kMethods[] = {"GET", "HEAD", "POST", "get", "PUT", "", "GET "};
  static constexpr std::string_view kTargets[] = {"/metrics", "/", "/metrics?x=1", "*", "/%6detrics", "metrics", ""};
  static constexpr std::string_view kVersions[] = {"HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1", ""};
  static constexpr std::string_view kNames[] = {"Host", "Content-Length", "Transfer-Encoding", "Range", "Accept",
                                                 "Accept-Encoding", "Expect", "Connection", "content-length", "X",
                                                 "Host ", ""};
  static constexpr std::string_view kEnds[] = {"\r\n", "\r\n", "\r\n", "\n", "\r", ""};
  const unsigned shape = take();
  std::string head(kMethods[shape % 7]);
  head += " ";
  head += kTargets[(shape / 7) % 7];
  head += text(4);
  head += " ";
  head += kVersions[take() % 6];
  head += kEnds[take() % 6];
  for (unsigned headers = take() % 6; headers > 0; --headers) {
    const unsigned kind = take();
    if (kind % 17 == 0) head += " ";  // a folded line
    head += kNames[kind % 12];
    head += kind % 13 == 0 ? "" : ": ";
    head += kind % 5 == 0 ? std::to_string(take() % 3) : text(12);
    head += kEnds[take() % 6];
  }
  head += kEnds[take() % 6];
  head += text(8);  // what follows the head (a body, the next request)
  return head;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::string_view raw(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string assembled = (data[0] & 0x80) != 0 ? plausible_head(raw) : std::string();
  const std::string_view bytes = (data[0] & 0x80) != 0 ? std::string_view(assembled) : raw;
  const HeadEnd whole = find_head_end(bytes);
  require(whole.length <= bytes.size() && whole.length <= kMaxRequestHead);
  if (whole.state == HeadEnd::State::too_large) require(bytes.size() >= kMaxRequestHead && whole.length == 0);
  if (whole.state == HeadEnd::State::incomplete) require(bytes.size() < kMaxRequestHead && whole.length == 0);
  if (whole.state == HeadEnd::State::complete) require(whole.length >= 2 && bytes[whole.length - 1] == '\n');
  // The same bytes in pieces, as a peer trickles them: the head ends at the same place.
  for (std::size_t got = piece; got < bytes.size() + piece; got += piece) {
    const std::string_view so_far = bytes.substr(0, std::min(got, bytes.size()));
    const HeadEnd now = find_head_end(so_far);
    if (whole.state == HeadEnd::State::complete) {
      require(so_far.size() >= whole.length ? now.state == HeadEnd::State::complete && now.length == whole.length
                                            : now.state == HeadEnd::State::incomplete);
    } else {
      require(now.state != HeadEnd::State::complete);
    }
  }
  if (whole.state != HeadEnd::State::complete) return 0;
  const std::string_view head = bytes.substr(0, whole.length);
  const HeadVerdict verdict = judge_request_head(head);
  require(verdict.status == 0 || verdict.status == 400 || verdict.status == 405 || verdict.status == 413 ||
          verdict.status == 431 || verdict.status == 505);
  require((verdict.status == 0) == verdict.reason.empty());
  if (verdict.status != 0) return 0;
  require(head.starts_with("GET ") || head.starts_with("HEAD "));
  require(verdict.head_only == head.starts_with("HEAD "));
  require(!verdict.target.empty() && verdict.target.data() >= head.data() &&
          verdict.target.data() + verdict.target.size() <= head.data() + head.size());
  const std::string headers = lower(head);
  require(headers.find("\ntransfer-encoding") == std::string::npos);
  check_answer(head, verdict);
  return 0;
}
