#include "shm/shared_object.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/memfd.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "shm/huge_pages.hpp"
#include "shm/memory_budget.hpp"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1; older libc headers lack the name
#endif

namespace ipcfloor {
namespace {

constexpr unsigned kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

std::string errno_text(int error) { return std::strerror(error); }

std::string kib_text(std::uint64_t bytes) { return fmt::format("{} KiB", (bytes + 1023) / 1024); }

std::size_t round_up_to(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

std::string memlock_limit_text() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return kib_text(limit.rlim_cur);
}

bool has_ipc_lock_capability() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

std::string memlock_fix() {
  return fmt::format("ulimit -l unlimited or prlimit --memlock=unlimited --pid {}", ::getpid());
}

// memfd_create, sized and reserved: a full pool or an exhausted memory must fail here with a
// message, never later as a SIGBUS on first touch.
Expected<UniqueFd> make_memfd(const std::string& label, std::size_t bytes, bool huge) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (huge) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  UniqueFd fd(::memfd_create(label.c_str(), flags));
  if (!fd) return fail(ErrorCode::io, "memfd_create({}) failed: {}", label, errno_text(errno));
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return fail(ErrorCode::resource, "cannot size {} to {} bytes: {}", label, bytes, errno_text(errno));
  if (const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); rc != 0) {
    if (huge)
      return fail(ErrorCode::resource, "the huge page pool could not supply {} pages of 2 MiB for {}: {}",
                  bytes / kHugePageBytes, label, errno_text(rc));
    return fail(ErrorCode::resource, "cannot reserve {} bytes of shared memory for {}: {}", bytes, label,
                errno_text(rc));
  }
  return fd;
}

}  // namespace

Expected<HugePagesMode> parse_hugepages_mode(std::string_view text) {
  if (text == "auto") return HugePagesMode::automatic;
  if (text == "require") return HugePagesMode::required;
  if (text == "off") return HugePagesMode::off;
  return fail(ErrorCode::invalid_argument, "--hugepages '{}' is not one of auto, require, off", text);
}

std::optional<std::uint64_t> memlock_limit_bytes() {
  if (has_ipc_lock_capability()) return std::nullopt;
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return static_cast<std::uint64_t>(limit.rlim_cur);
}

Expected<void> check_memlock_budget(std::uint64_t bytes, std::string_view what) {
  const auto limit = memlock_limit_bytes();
  if (!limit || *limit >= bytes) return {};
  return fail(ErrorCode::resource, "--mlock require: RLIMIT_MEMLOCK is {}, {} need {} (fix: {}, then start again)",
              memlock_limit_text(), what, kib_text(bytes), memlock_fix());
}

Expected<MlockMode> parse_mlock_mode(std::string_view text) {
  if (text == "auto") return MlockMode::automatic;
  if (text == "require") return MlockMode::required;
  if (text == "off") return MlockMode::off;
  return fail(ErrorCode::invalid_argument, "--mlock '{}' is not one of auto, require, off", text);
}

std::string_view to_string(HugePagesMode mode) noexcept {
  switch (mode) {
    case HugePagesMode::automatic: return "auto";
    case HugePagesMode::required: return "require";
    case HugePagesMode::off: return "off";
  }
  return "unknown";
}

std::string_view to_string(MlockMode mode) noexcept {
  switch (mode) {
    case MlockMode::automatic: return "auto";
    case MlockMode::required: return "require";
    case MlockMode::off: return "off";
  }
  return "unknown";
}

Expected<SharedObject> SharedObject::create(const ObjectSpec& spec) {
  if (spec.bytes == 0) return fail(ErrorCode::invalid_argument, "{}: a shared object needs at least one byte", spec.label);
  SharedObject object;

  // Backing: huge pages when asked for and the pool has room; the pool is read first so that a
  // short pool is reported with its numbers and the fix, not as a bare ENOSPC.
  bool huge = false;
  if (spec.hugepages != HugePagesMode::off) {
    const std::size_t huge_bytes = round_up_to(spec.bytes, kHugePageBytes);
    const std::uint64_t pages_needed = huge_bytes / kHugePageBytes;
    const HugePageBudget budget = huge_page_budget();
    if (budget.available >= pages_needed) {
      auto fd = make_memfd(spec.label, huge_bytes, true);
      if (fd) {
        object.fd_ = std::move(*fd);
        object.bytes_ = huge_bytes;
        huge = true;
      } else if (spec.hugepages == HugePagesMode::required) {
        fd.error().message = fmt::format("--hugepages require: {}", fd.error().message);
        return std::unexpected(std::move(fd.error()));
      } else {
        object.warnings_.push_back(fmt::format("no huge pages: {}; fell back to 4 KiB pages", fd.error().message));
      }
    } else {
      const std::string reason =
          budget.total == 0 ? std::string("the host has no 2 MiB huge page pool")
                            : fmt::format("the 2 MiB huge page pool has {} free page(s), {} needs {}", budget.available,
                                          spec.label, pages_needed);
      const std::string fix = huge_pages_fix(pages_needed, budget);
      if (spec.hugepages == HugePagesMode::required)
        return fail(ErrorCode::resource, "--hugepages require: {} (fix: {})", reason, fix);
      object.warnings_.push_back(fmt::format("no huge pages: {}; fell back to 4 KiB pages (fix: {})", reason, fix));
    }
  }
  if (!huge) {
    object.bytes_ = round_up_to(spec.bytes, kSmallPageBytes);
    auto fd = make_memfd(spec.label, object.bytes_, false);
    if (!fd) return std::unexpected(std::move(fd.error()));
    object.fd_ = std::move(*fd);
  }
  object.huge_pages_ = huge;

  void* at = ::mmap(nullptr, object.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, object.fd_.get(), 0);
  if (at == MAP_FAILED)
    return fail(ErrorCode::resource, "cannot map {} ({} bytes): {}", spec.label, object.bytes_, errno_text(errno));
  object.address_ = static_cast<std::byte*>(at);

  // Huge pages are never swapped out, so they count as locked without spending RLIMIT_MEMLOCK.
  if (huge) {
    object.locked_ = true;
  } else if (spec.mlock != MlockMode::off) {
    if (::mlock(object.address_, object.bytes_) == 0) {
      object.locked_ = true;
    } else {
      const int error = errno;
      const std::string why = fmt::format("mlock failed ({}): RLIMIT_MEMLOCK is {}, {} needs {}", errno_text(error),
                                          memlock_limit_text(), spec.label, kib_text(object.bytes_));
      const std::string fix = memlock_fix();
      if (spec.mlock == MlockMode::required)
        return fail(ErrorCode::resource, "--mlock require: {} (fix: {}, then start again)", why, fix);
      object.warnings_.push_back(fmt::format("{}; running unlocked (fix: {})", why, fix));
    }
  }

  // Write every 4 KiB page once, now. MAP_POPULATE builds the guest's page tables, but under a
  // hypervisor the first write to each page still costs microseconds with no guest fault at all
  // (`ipcfloor bench hygiene`, memory section; docs/RESULTS.md): paid here at startup, not by the
  // first frames through each slot. Zero into zero pages: the contents do not change.
  for (std::size_t offset = 0; offset < object.bytes_; offset += kSmallPageBytes) {
    // relaxed: nobody else can see the object yet; its hand-over publishes it.
    std::atomic_ref<std::uint8_t>(*reinterpret_cast<std::uint8_t*>(object.address_ + offset))
        .store(0, std::memory_order_relaxed);
  }
  return object;
}

Expected<void> SharedObject::seal_size() {
  if (::fcntl(fd_.get(), F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0)
    return fail(ErrorCode::io, "cannot seal a shared object against resizing: {}", errno_text(errno));
  return {};
}

Expected<void> SharedObject::seal_size_and_future_writes() {
  if (::fcntl(fd_.get(), F_ADD_SEALS, kSizeSeals | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0)
    return fail(ErrorCode::io, "cannot seal a shared object against resizing and writes (needs Linux 5.1): {}",
                errno_text(errno));
  return {};
}

namespace {

// The pages a received object lacks, this process allocates as it maps and reads them (they are
// charged to it, not to the engine): a sparse object from a lying engine could take all the
// memory the client may have. An engine's objects are allocated whole at creation (fallocate),
// so this is nothing for them; a lack the host or the cgroup cannot give is refused.
Expected<void> check_backed(const struct stat& info, std::size_t bytes, std::string_view what) {
  const std::uint64_t allocated = static_cast<std::uint64_t>(info.st_blocks) * 512;
  if (allocated >= bytes) return {};
  const std::uint64_t lacking = bytes - allocated;
  const HostMemory host = read_host_memory();
  for (const auto& limit : {host.available, host.cgroup})
    if (limit && lacking > limit->bytes)
      return fail(ErrorCode::resource, "{} holds {} bytes of which only {} are allocated: mapping it would take the "
                  "other {} from this process, more than it may have ({}); refusing a sparse object (a lying "
                  "engine?)", what, bytes, allocated, bytes_text(lacking), limit->source);
  return {};
}

}  // namespace

Expected<SharedObject> SharedObject::map_received(UniqueFd fd, std::size_t bytes, PeerAccess access,
                                                  std::string_view what) {
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", what, errno_text(errno));
  if (static_cast<std::size_t>(info.st_size) != bytes || bytes == 0)
    return fail(ErrorCode::protocol, "{} holds {} bytes, but the engine announced {}", what, info.st_size, bytes);
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) return fail(ErrorCode::protocol, "{} is not a sealable memfd: {}", what, errno_text(errno));
  const unsigned required = access == PeerAccess::read_only ? kSizeSeals | F_SEAL_FUTURE_WRITE : kSizeSeals;
  if ((static_cast<unsigned>(seals) & required) != required)
    return fail(ErrorCode::protocol, "{} is not sealed as ipcfloor seals it (seals {:#x}, needs {:#x})", what, seals,
                required);
  if (auto backed = check_backed(info, bytes, what); !backed) return std::unexpected(std::move(backed.error()));
  const int protection = access == PeerAccess::read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  void* at = ::mmap(nullptr, bytes, protection, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (at == MAP_FAILED) return fail(ErrorCode::resource, "cannot map {} ({} bytes): {}", what, bytes, errno_text(errno));
  // The mapping is all a peer needs: the descriptor closes here (with `fd`), so no other process
  // of the peer's uid can reopen the object through /proc/PID/fd.
  SharedObject object;
  object.address_ = static_cast<std::byte*>(at);
  object.bytes_ = bytes;
  return object;
}

SharedObject::SharedObject(SharedObject&& other) noexcept
    : fd_(std::move(other.fd_)),
      address_(std::exchange(other.address_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      huge_pages_(other.huge_pages_),
      locked_(other.locked_),
      warnings_(std::move(other.warnings_)) {}

SharedObject& SharedObject::operator=(SharedObject&& other) noexcept {
  if (this != &other) {
    unmap();
    fd_ = std::move(other.fd_);
    address_ = std::exchange(other.address_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    huge_pages_ = other.huge_pages_;
    locked_ = other.locked_;
    warnings_ = std::move(other.warnings_);
  }
  return *this;
}

SharedObject::~SharedObject() { unmap(); }

void SharedObject::keep_mapped() noexcept {
  address_ = nullptr;
  bytes_ = 0;
}

void SharedObject::unmap() noexcept {
  if (address_ != nullptr) ::munmap(address_, bytes_);  // also drops the mlock
  address_ = nullptr;
  bytes_ = 0;
}

}  // namespace ipcfloor
