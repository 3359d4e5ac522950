#include "kernel/sha256.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <openssl/evp.h>

namespace ipcfloor {

Expected<Sha256> sha256_of_fd(int fd, const std::string& what) {
  const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1)
    return fail(ErrorCode::resource, "{}: cannot start a SHA-256 digest", what);
  std::vector<unsigned char> buffer(std::size_t{1} << 16);
  off_t offset = 0;
  for (;;) {
    const ssize_t got = ::pread(fd, buffer.data(), buffer.size(), offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::io, "{}: cannot read it for its digest: {}", what, std::strerror(errno));
    }
    if (got == 0) break;
    if (EVP_DigestUpdate(context.get(), buffer.data(), static_cast<std::size_t>(got)) != 1)
      return fail(ErrorCode::resource, "{}: the SHA-256 digest failed", what);
    offset += got;
  }
  Sha256 digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context.get(), digest.data(), &length) != 1 || length != digest.size())
    return fail(ErrorCode::resource, "{}: the SHA-256 digest failed", what);
  return digest;
}

std::string to_hex(const Sha256& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(digest.size() * 2);
  for (const std::uint8_t byte : digest) {
    text.push_back(kDigits[byte >> 4]);
    text.push_back(kDigits[byte & 15]);
  }
  return text;
}

}  // namespace ipcfloor
