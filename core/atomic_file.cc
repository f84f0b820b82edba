// File: core/atomic_file.cc
// Writing a file atomically: a locked temporary beside the target, fsync, rename.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace loom {

namespace {

std::string errno_text(int error) { return std::generic_category().message(error); }

// The umask, read without changing it (umask(2) can only be read by setting
// it, which races with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("Umask:")) continue;
    const size_t digits = line.find_first_not_of(" \t", 6);
    unsigned mask = 0;
    if (digits == std::string::npos) break;
    const auto parsed = std::from_chars(line.data() + digits, line.data() + line.size(), mask, 8);
    if (parsed.ec == std::errc()) return static_cast<mode_t>(mask & 0777);
    break;
  }
  return 022;  // the usual umask, where /proc does not say
}

// Temporary files left older than this process by a writer that no longer
// holds their lock are stale. (A container restarts its trainer with the same
// PID, so the PID in the name cannot tell a dead writer from us.)
const std::filesystem::file_time_type kProcessStart = std::filesystem::file_time_type::clock::now();

// The PID in "<name>.tmp.<pid>" or "<name>.tmp.<pid>.<suffix>", if `entry` is such a name.
std::optional<pid_t> temp_owner(std::string_view entry, std::string_view name) {
  std::string prefix = fmt::format("{}.tmp.", name);
  if (!entry.starts_with(prefix)) return std::nullopt;
  std::string_view rest = entry.substr(prefix.size());
  pid_t pid = 0;
  auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (error != std::errc() || end == rest.data() || pid <= 0) return std::nullopt;
  if (end != rest.data() + rest.size() && *end != '.') return std::nullopt;
  return pid;
}

// Removes the temporary files of earlier saves to `path` whose writers died
// mid-save. A file made after we started may be a writer between mkstemp and
// flock, so it is left unless its PID is gone.
void remove_stale_temps(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code error;
  fs::directory_iterator it(dir, error);
  if (error) return;  // the save itself reports an unusable folder
  std::string name = path.filename().string();
  // Incremented with an error code: the range-for's ++ throws std::filesystem_error.
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const fs::directory_entry& entry = *it;
    std::optional<pid_t> owner = temp_owner(entry.path().filename().string(), name);
    if (!owner || !entry.is_regular_file(error)) continue;
    int fd = ::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    bool unlocked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    bool owner_gone = ::kill(*owner, 0) != 0 && errno == ESRCH;
    bool older = entry.last_write_time(error) < kProcessStart && !error;
    if (unlocked && (owner_gone || older)) ::unlink(entry.path().c_str());
    ::close(fd);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op)
    : path_(std::move(path)), op_(std::move(op)) {
  remove_stale_temps(path_);
  std::string pattern = fmt::format("{}.tmp.{}.XXXXXX", path_, ::getpid());
  fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
  temp_path_ = pattern;
  if (fd_ < 0) fail(fmt::format("cannot create a temporary file {}", temp_path_));
  // mkstemp makes the file 0600; the target gets the mode a plain create would give it.
  if (::flock(fd_, LOCK_EX) != 0 || ::fchmod(fd_, 0666 & ~current_umask()) != 0) {
    int error = errno;
    ::close(std::exchange(fd_, -1));
    ::unlink(temp_path_.c_str());
    errno = error;
    fail(fmt::format("cannot lock the temporary file {}", temp_path_));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!renamed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, uint64_t nbytes) {
  const auto* in = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t put = ::write(fd_, in, std::min<uint64_t>(nbytes, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail(fmt::format("cannot write {}", temp_path_));
    in += put;
    nbytes -= static_cast<uint64_t>(put);
  }
}

// The lock is held until after the rename, so no other writer takes our file
// for a dead writer's.
void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail(fmt::format("cannot fsync {}", temp_path_));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail(fmt::format("cannot rename {} over it", temp_path_));
  }
  renamed_ = true;
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail(fmt::format("cannot close {}", temp_path_));
  std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  if (dir.empty()) dir = ".";
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool synced = dir_fd >= 0 && ::fsync(dir_fd) == 0;
  int error = errno;
  if (dir_fd >= 0) ::close(dir_fd);
  LOOM_CHECK(synced, IoError,
             "[{}] {}: saved, but cannot fsync the directory {}: {} (the new file may not survive "
             "a power loss)",
             op_, path_, dir.string(), errno_text(error));
}

void AtomicFile::fail(std::string_view action) const {
  int error = errno;
  throw IoError(fmt::format("[{}] {}: {}: {} (any previous file there is untouched)", op_, path_,
                            action, errno_text(error)));
}

}  // namespace loom
