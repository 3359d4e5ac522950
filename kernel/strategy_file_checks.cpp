#include "kernel/strategy_file_checks.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// Links followed on one path at most (the kernel's own limit, MAXSYMLINKS).
constexpr int kMaxLinks = 40;
// The most of a dynamic symbol table or its strings the check reads (a strategy's are a few KiB).
constexpr std::uint64_t kMaxSymbolBytes = std::uint64_t{64} << 20;

template <class... Args>
std::unexpected<Error> refuse(const std::string& origin, fmt::format_string<Args...> format, Args&&... args) {
  return std::unexpected(Error{ErrorCode::strategy,
                               fmt::format("strategy {}: {}", origin, fmt::format(format, std::forward<Args>(args)...))});
}

std::string_view kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe): reading it waits for a writer";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  return "not a regular file";
}

// StrictModes for one file, folder or link: ours or root's, and (but for a link, whose mode means
// nothing) writable by nobody else unless a sticky folder.
Expected<void> check_owner_and_mode(const struct stat& st, const std::string& what, const std::string& origin) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return refuse(origin, "{} belongs to uid {}, not to this user ({}) or root", what, st.st_uid, me);
  if (S_ISLNK(st.st_mode)) return {};
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (others_write && !(S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0))
    return refuse(origin, "{} may be written by users other than its owner (mode {:04o}); make it writable by its "
                  "owner only (chmod go-w)", what, st.st_mode & 07777);
  return {};
}

std::string joined(const std::string& folder, std::string_view name) {
  std::string path = folder;
  if (path != "/") path.push_back('/');
  path.append(name);
  return path;
}

// The path's components, in order, pushed in front of `todo` (a link's target before what follows it).
void push_front_components(std::deque<std::string>& todo, std::string_view path) {
  std::vector<std::string> parts;
  for (std::size_t at = 0; at <= path.size();) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    if (slash > at) parts.emplace_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo.push_front(*it);
}

Expected<void> check_elf_type(int fd, const std::string& origin) {
  unsigned char head[18] = {};
  if (::pread(fd, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) || std::memcmp(head, "\x7f" "ELF", 4) != 0)
    return refuse(origin, "it is not a shared object (no ELF header)");
  const unsigned type = head[16] | (head[17] << 8);  // e_type, little-endian on x86-64
  if (type != ET_DYN) return refuse(origin, "it is an ELF file but not a shared object (e_type {}; build it with -shared)", type);
  return {};
}

// Opens the last component, `name` in `dir`, after checking what lstat says it is.
Expected<UniqueFd> open_final(int dir, const std::string& name, const struct stat& seen, const std::string& where,
                              const std::string& origin) {
  if (!S_ISREG(seen.st_mode)) return refuse(origin, "it is not a regular file: {} is {}", where, kind_of(seen.st_mode));
  // O_NONBLOCK: should a FIFO take its place after the lstat, the open still returns at once.
  UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return refuse(origin, "cannot open it: {}", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return refuse(origin, "cannot inspect it: {}", std::strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_dev != seen.st_dev || st.st_ino != seen.st_ino)
    return refuse(origin, "it is not a regular file, or it was replaced while it was checked");
  if (auto ok = check_owner_and_mode(st, "the file", origin); !ok) return std::unexpected(ok.error());
  if (auto ok = check_elf_type(fd.get(), origin); !ok) return std::unexpected(ok.error());
  return fd;
}

}  // namespace

Expected<UniqueFd> open_strategy_file(const std::string& path, const std::string& origin) {
  if (path.empty()) return refuse(origin, "no file named");
  std::deque<std::string> todo;
  if (path.front() != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return refuse(origin, "cannot resolve it: {}", std::strerror(errno));
    push_front_components(todo, path);
    push_front_components(todo, cwd);
  } else {
    push_front_components(todo, path);
  }
  UniqueFd dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::string where = "/";
  struct stat st {};
  if (!dir || ::fstat(dir.get(), &st) != 0) return refuse(origin, "cannot inspect folder /: {}", std::strerror(errno));
  if (auto ok = check_owner_and_mode(st, "folder /", origin); !ok) return std::unexpected(ok.error());
  for (int links = 0; !todo.empty();) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    const std::string next = name == ".." ? (where.rfind('/') == 0 ? "/" : where.substr(0, where.rfind('/')))
                                          : joined(where, name);
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return refuse(origin, "cannot open it: {}: {}", next, std::strerror(errno));
    if (S_ISLNK(st.st_mode)) {
      // Another user's link may point anywhere, at any time: the link is checked as a folder is.
      if (auto ok = check_owner_and_mode(st, fmt::format("the link {}", next), origin); !ok)
        return std::unexpected(ok.error());
      if (++links > kMaxLinks) return refuse(origin, "more than {} links on its path", kMaxLinks);
      char target[PATH_MAX];
      const ssize_t length = ::readlinkat(dir.get(), name.c_str(), target, sizeof target - 1);
      if (length <= 0) return refuse(origin, "cannot read the link {}: {}", next, std::strerror(errno));
      const std::string_view to(target, static_cast<std::size_t>(length));
      push_front_components(todo, to);
      if (to.front() == '/') {
        dir.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
        where.clear();  // not `= "/"`: GCC 12 sees a false -Wrestrict overlap in that assignment
        where.push_back('/');
      }
      continue;
    }
    if (todo.empty() && name != "..") return open_final(dir.get(), name, st, next, origin);
    if (!S_ISDIR(st.st_mode)) return refuse(origin, "cannot open it: {} is not a folder", next);
    if (auto ok = check_owner_and_mode(st, fmt::format("folder {}", next), origin); !ok) return std::unexpected(ok.error());
    dir.reset(::openat(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) return refuse(origin, "cannot open folder {}: {}", next, std::strerror(errno));
    where = next;
  }
  return refuse(origin, "it names a folder, not a file");
}

Expected<std::string_view> find_exported_entry(int fd, std::span<const std::string_view> entries,
                                                const std::string& origin) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return refuse(origin, "cannot inspect it: {}", std::strerror(errno));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const auto read_at = [&](void* into, std::uint64_t bytes, std::uint64_t offset) {
    return offset <= size && bytes <= size - offset &&
           ::pread(fd, into, bytes, static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes);
  };
  Elf64_Ehdr header{};
  if (!read_at(&header, sizeof header, 0) || header.e_ident[EI_CLASS] != ELFCLASS64 ||
      header.e_ident[EI_DATA] != ELFDATA2LSB || header.e_machine != EM_X86_64)
    return refuse(origin, "it is not a 64-bit x86-64 shared object");
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shnum == 0 || header.e_shnum >= SHN_LORESERVE)
    return refuse(origin, "it has no section table to find its exported symbols in");
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  if (!read_at(sections.data(), sections.size() * sizeof(Elf64_Shdr), header.e_shoff))
    return refuse(origin, "its section table lies outside the file");
  for (const Elf64_Shdr& table : sections) {
    if (table.sh_type != SHT_DYNSYM) continue;
    if (table.sh_link >= sections.size() || table.sh_size > kMaxSymbolBytes ||
        sections[table.sh_link].sh_size > kMaxSymbolBytes)
      return refuse(origin, "its dynamic symbol table is malformed");
    std::vector<Elf64_Sym> symbols(table.sh_size / sizeof(Elf64_Sym));
    std::string strings(sections[table.sh_link].sh_size, '\0');
    if (!read_at(symbols.data(), symbols.size() * sizeof(Elf64_Sym), table.sh_offset) ||
        !read_at(strings.data(), strings.size(), sections[table.sh_link].sh_offset))
      return refuse(origin, "its dynamic symbol table lies outside the file");
    for (const std::string_view entry : entries)
      for (const Elf64_Sym& symbol : symbols) {
        if (symbol.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(symbol.st_info) != STT_FUNC) continue;
        const unsigned binding = ELF64_ST_BIND(symbol.st_info);
        if ((binding != STB_GLOBAL && binding != STB_WEAK) || symbol.st_name >= strings.size()) continue;
        const std::string_view name(strings.c_str() + symbol.st_name);
        if (name == entry) return entry;
      }
  }
  if (entries.size() > 1)
    return refuse(origin, "it exports no {} (or version 1's {}) symbol (see include/ipcfloor/strategy.h); nothing of "
                  "it was run", entries[0], entries[1]);
  return refuse(origin, "it exports no {} symbol (see include/ipcfloor/strategy.h); nothing of it was run",
                entries.empty() ? std::string_view("entry") : entries.front());
}

Expected<void> check_parameter_bounds(const Strategy& s, const Combo& example, std::uint64_t bars,
                                      const std::string& origin) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  // Each side's probes in growing magnitude; no series holds 2^31 bars, nor a window of -1.
  constexpr std::int64_t kUp[] = {std::int64_t{1} << 31, std::int64_t{1} << 62, kMax};
  constexpr std::int64_t kDown[] = {-1, -5, kMin};
  for (std::uint32_t k = 0; k < s.param_count(); ++k) {
    const auto probe = [&](std::int64_t value) {
      Combo combo = example;
      std::memcpy(reinterpret_cast<std::int64_t*>(&combo) + k, &value, sizeof value);
      return combo;
    };
    for (const auto& side : {std::span<const std::int64_t>(kUp), std::span<const std::int64_t>(kDown)}) {
      std::uint64_t last_cost = 0;
      std::int64_t last_value = 0;
      for (const std::int64_t value : side) {
        const Combo combo = probe(value);
        if (!s.accepts(combo, bars)) continue;
        const std::uint64_t cost = s.cost(combo, bars);
        if (value == kMax || value == kMin || cost == std::numeric_limits<std::uint64_t>::max() ||
            (last_value != 0 && cost > last_cost))
          return refuse(origin, "it accepts parameter {} ({}) = {} at a cost of {} units{}: every parameter must be "
                        "bounded, so that no request can ask for unbounded work", k, s.param_name(k), value, cost,
                        last_value != 0 ? fmt::format(", more than at {} ({} units)", last_value, last_cost) : "");
        last_cost = cost;
        last_value = value;
      }
    }
  }
  return {};
}

}  // namespace ipcfloor
