// File: core/input_file.cc
// Regular-file reads and filesystem queries whose failures are IoErrors.
#include "core/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "core/error.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int error) { return std::generic_category().message(error); }

fs::file_type type_of_mode(mode_t mode) {
  if (S_ISREG(mode)) return fs::file_type::regular;
  if (S_ISDIR(mode)) return fs::file_type::directory;
  if (S_ISFIFO(mode)) return fs::file_type::fifo;
  if (S_ISCHR(mode)) return fs::file_type::character;
  if (S_ISBLK(mode)) return fs::file_type::block;
  if (S_ISSOCK(mode)) return fs::file_type::socket;
  return fs::file_type::unknown;
}

[[noreturn]] void refuse_type(std::string_view tag, const std::string& path, fs::file_type type) {
  throw IoError(fmt::format("[{}] {}: not a regular file ({}); give the path of a file", tag, path,
                            file_type_name(type)));
}

}  // namespace

InputFile::InputFile(const std::string& path, std::string_view tag) : path_(path), tag_(tag) {
  // Looked at before opening: opening a device can have effects of its own.
  struct stat info = {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    refuse_type(tag, path, type_of_mode(info.st_mode));
  }
  // O_NONBLOCK: should a FIFO take the file's place after the stat, opening it
  // cannot wait for a writer; fstat then refuses it. Regular files ignore the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  LOOM_CHECK(fd_ >= 0, IoError, "[{}] {}: cannot open: {}", tag, path, errno_text(errno));
  const bool stat_ok = ::fstat(fd_, &info) == 0;
  const int error = errno;
  if (!stat_ok || !S_ISREG(info.st_mode)) {
    ::close(fd_);
    if (stat_ok) refuse_type(tag, path, type_of_mode(info.st_mode));
    throw IoError(fmt::format("[{}] {}: cannot read its status: {}", tag, path, errno_text(error)));
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_exact(void* data, uint64_t nbytes, std::string_view what) {
  auto* out = static_cast<char*>(data);
  while (nbytes > 0) {
    ssize_t got = ::read(fd_, out, std::min<uint64_t>(nbytes, 1u << 30));
    if (got < 0 && errno == EINTR) continue;
    LOOM_CHECK(got > 0, IoError, "[{}] {}: cannot read {}: {}", tag_, path_, what,
               got == 0 ? "unexpected end of file (did it shrink while being read?)"
                        : errno_text(errno));
    out += got;
    nbytes -= static_cast<uint64_t>(got);
  }
}

std::vector<uint8_t> read_regular_file(const std::string& path, std::string_view tag,
                                       uint64_t max_bytes) {
  InputFile file(path, tag);
  LOOM_CHECK(file.size() <= max_bytes, IoError,
             "[{}] {}: file is larger than the {} bytes this reader accepts ({} bytes)", tag, path,
             max_bytes, file.size());
  std::vector<uint8_t> bytes(file.size());
  file.read_exact(bytes.data(), bytes.size(), "the file");
  return bytes;
}

fs::file_type path_type(const std::string& path, std::string_view tag) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  // A missing file (or a missing folder on the way to it) is an answer, not a failure.
  LOOM_CHECK(status.type() != fs::file_type::none, IoError, "[{}] {}: cannot look it up: {}", tag,
             path, error.message());
  return status.type();
}

std::string_view file_type_name(fs::file_type type) {
  switch (type) {
    case fs::file_type::regular:
      return "a regular file";
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::symlink:
      return "a symbolic link";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::not_found:
      return "nothing";
    default:
      return "a file of unknown type";
  }
}

std::vector<FolderEntry> folder_entries(const std::string& folder, std::string_view tag) {
  std::error_code error;
  fs::directory_iterator it(folder, error);
  std::vector<FolderEntry> entries;
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    std::error_code status_error;
    const fs::file_status status = it->status(status_error);
    LOOM_CHECK(status.type() != fs::file_type::none, IoError, "[{}] {}: cannot look it up: {}",
               tag, it->path().string(), status_error.message());
    entries.push_back({it->path(), status.type()});
  }
  LOOM_CHECK(!error, IoError, "[{}] {}: cannot list the folder: {}", tag, folder, error.message());
  std::sort(entries.begin(), entries.end(),
            [](const FolderEntry& a, const FolderEntry& b) { return a.path < b.path; });
  return entries;
}

}  // namespace loom
