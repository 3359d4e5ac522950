#include "bench/stdio_server.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

namespace {

constexpr std::size_t kFrameBytes = sizeof(Combo);

// Reads until `size` bytes arrived or the input ended. Returns the bytes read, or -1 on error.
ssize_t read_full(int fd, unsigned char* data, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = read(fd, data + got, size - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

bool write_full(int fd, const unsigned char* data, std::size_t size) {
  std::size_t put = 0;
  while (put < size) {
    const ssize_t n = write(fd, data + put, size - put);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    put += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

int run_stdio_echo(int in_fd, int out_fd) {
  KernelWorkspace workspace(1);  // ECHO never touches it; dispatch_request's signature wants one
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  ResponseSlot response{};
  unsigned char frame[kFrameBytes];
  for (std::uint64_t seq = 0;; ++seq) {
    const ssize_t got = read_full(in_fd, frame, sizeof frame);
    if (got == 0) return 0;
    if (got < 0) {
      fmt::print(stderr, "ipcfloor stdio: reading frame {}: {}\n", seq, std::strerror(errno));
      return 1;
    }
    if (static_cast<std::size_t>(got) != sizeof frame) {
      fmt::print(stderr, "ipcfloor stdio: frame {} is {} bytes; frames are {}\n", seq, got, sizeof frame);
      return 1;
    }
    request.seq = seq;
    std::memcpy(&request.params, frame, sizeof frame);
    const Status status = dispatch_request(request, {}, 0.0, workspace, response);
    if (status != Status::ok) {
      fmt::print(stderr, "ipcfloor stdio: ECHO {} failed: {}\n", seq, to_string(status));
      return 1;
    }
    const Combo echoed = response.echo();
    std::memcpy(frame, &echoed, sizeof frame);
    if (!write_full(out_fd, frame, sizeof frame)) {
      fmt::print(stderr, "ipcfloor stdio: writing reply {}: {}\n", seq, std::strerror(errno));
      return 1;
    }
  }
}

}  // namespace ipcfloor
