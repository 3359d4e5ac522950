#pragma once
// One shared-memory object made with memfd_create(2): it has no name anyone could open, its
// size is fixed by seals, and it reaches a peer only as a file descriptor the engine sends.
//
// Why memfds: a named object (a file in /dev/shm or on hugetlbfs) can be opened, rewritten and
// truncated by any process of the same user, and a truncated mapping kills whoever touches it
// with SIGBUS. A memfd's seals bind everyone, its creator included, and cannot be taken back:
//   - every object is sealed against shrinking and growing, so no peer can truncate it;
//   - the data object is also sealed against future writes, so a peer can map it read-only and
//     nothing else, while the engine keeps the writable mapping it made before sealing.
//
// Backing: 2 MiB huge pages (MFD_HUGETLB) when asked for and the pool has room, else 4 KiB
// shmem pages. Either way the space is reserved up front (fallocate), every page is populated
// and written once, and the mapping is mlock'ed as MlockMode says.
//
// Threads: create/map_received/seal are setup calls (syscalls, allocation, Expected). The
// accessors are noexcept and safe from any thread.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

// --hugepages auto|require|off
enum class HugePagesMode : std::uint8_t {
  automatic,  // huge pages when the pool has room, else 4 KiB pages with a warning
  required,   // huge pages or a clear error naming the fix
  off,        // 4 KiB pages only
};

// --mlock auto|require|off
enum class MlockMode : std::uint8_t {
  automatic,  // mlock; when RLIMIT_MEMLOCK forbids it, warn and run unlocked
  required,   // mlock or a clear error naming the fix
  off,        // never mlock
};

// Parse the command-line spellings "auto", "require", "off"; invalid_argument otherwise.
[[nodiscard]] Expected<HugePagesMode> parse_hugepages_mode(std::string_view text);
[[nodiscard]] Expected<MlockMode> parse_mlock_mode(std::string_view text);
[[nodiscard]] std::string_view to_string(HugePagesMode mode) noexcept;
[[nodiscard]] std::string_view to_string(MlockMode mode) noexcept;

inline constexpr std::size_t kSmallPageBytes = 4096;

// For --mlock require, before anything is built: resource, naming RLIMIT_MEMLOCK and the fix,
// when this process can lock less than `bytes` (the sum of everything it will lock, `what`).
// A process with CAP_IPC_LOCK has no limit. Objects created later still lock one by one; this
// only makes a limit that cannot hold them all fail at start instead of at the Nth client.
[[nodiscard]] Expected<void> check_memlock_budget(std::uint64_t bytes, std::string_view what);

// What this process may lock, by the rule mlock follows: nullopt when nothing limits it
// (CAP_IPC_LOCK, as root has, or an unlimited RLIMIT_MEMLOCK), else RLIMIT_MEMLOCK in bytes.
// The rule check_memlock_budget applies and `ipcfloor doctor` reports, so the two agree.
[[nodiscard]] std::optional<std::uint64_t> memlock_limit_bytes();

struct ObjectSpec {
  std::string label;  // memfd name, seen in /proc/PID/fd and maps: "ipcfloor:NAME:data"
  std::size_t bytes = 0;  // rounded up to the page size of the backing chosen
  HugePagesMode hugepages = HugePagesMode::off;
  MlockMode mlock = MlockMode::automatic;
};

// What a peer may do with a received object.
enum class PeerAccess : std::uint8_t {
  read_only,   // the data object: must carry the future-write seal; mapped PROT_READ
  read_write,  // a lane object: mapped read-write
};

class SharedObject {
 public:
  // Engine side: creates the memfd, sizes and reserves it, maps it read-write, populates and
  // writes every page, locks it per spec.mlock. Errors: invalid_argument (zero bytes),
  // resource (huge pages required but missing, mlock required but forbidden, no memory),
  // io (anything else). warnings() lists every fallback taken.
  [[nodiscard]] static Expected<SharedObject> create(const ObjectSpec& spec);

  // Engine side: no one may shrink or grow the object from now on.
  [[nodiscard]] Expected<void> seal_size();
  // Engine side: also no new writable mapping and no write(2), by anyone; the mapping this
  // object holds stays writable. Peers can then only map it read-only.
  [[nodiscard]] Expected<void> seal_size_and_future_writes();

  // Peer side: maps a descriptor the engine sent, then closes it (the object keeps only the
  // mapping; fd() is -1). Checks, before mapping, that the object has exactly `bytes` bytes and
  // carries the seals `access` needs (so it cannot be truncated under us, and a read-only object
  // cannot change other than through the engine). `what` names the object in errors ("the data
  // object of engine NAME").
  [[nodiscard]] static Expected<SharedObject> map_received(UniqueFd fd, std::size_t bytes, PeerAccess access,
                                                           std::string_view what);

  // An empty object: no descriptor, no mapping. What a moved-from object becomes.
  SharedObject() = default;
  SharedObject(SharedObject&& other) noexcept;
  SharedObject& operator=(SharedObject&& other) noexcept;
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject();  // unmaps (which also unlocks) and closes the descriptor

  [[nodiscard]] std::byte* data() const noexcept { return address_; }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  // The descriptor of an object this process created; -1 for one it received.
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] bool huge_pages() const noexcept { return huge_pages_; }
  // True when the pages cannot be swapped out: mlock'ed, or huge pages (never swapped).
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }

  // Lets go of the mapping without unmapping it: the pages stay mapped until the process exits
  // (the descriptor still closes). For memory that a thread which could not be stopped may still
  // read. Leaves this object empty. Any thread that owns the object.
  void keep_mapped() noexcept;

 private:
  void unmap() noexcept;

  UniqueFd fd_;
  std::byte* address_ = nullptr;
  std::size_t bytes_ = 0;
  bool huge_pages_ = false;
  bool locked_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace ipcfloor
