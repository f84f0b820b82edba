// File: core/input_file.h
// Reading the files users point Loom at (data sets, checkpoints, images):
// regular files only, so a FIFO, a device or a folder is refused at once
// instead of blocking forever or reading /dev/zero to a cap; the size is known
// (and checked) before anything is read. Also the std::filesystem queries the
// loaders make, with their failures (a symlink loop, a path longer than
// PATH_MAX, a folder without permission) as IoErrors rather than
// std::filesystem_error. Every error reads "[tag] path: what went wrong: the
// OS's reason", e.g.
//   [idx] /data/train-images-idx3-ubyte: not a regular file (a FIFO); give the path of a file
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// A regular file opened for reading. `tag` names the reader in errors ("idx").
class InputFile {
 public:
  InputFile(const std::string& path, std::string_view tag);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads the next `nbytes` bytes; `what` names them in errors ("the header").
  void read_exact(void* data, uint64_t nbytes, std::string_view what);

 private:
  std::string path_, tag_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of the regular file `path`; one larger than `max_bytes` is
// refused before it is read.
std::vector<uint8_t> read_regular_file(const std::string& path, std::string_view tag,
                                       uint64_t max_bytes);

// What `path` is, symbolic links followed: file_type::not_found when nothing
// is there (no error), else the type; an IoError when the OS cannot tell.
std::filesystem::file_type path_type(const std::string& path, std::string_view tag);

// "a regular file", "a directory", "a FIFO", ...: for messages.
std::string_view file_type_name(std::filesystem::file_type type);

struct FolderEntry {
  std::filesystem::path path;
  std::filesystem::file_type type;  // symbolic links followed; not_found when dangling
};

// The entries of `folder`, sorted by name. IoError when it cannot be listed.
std::vector<FolderEntry> folder_entries(const std::string& folder, std::string_view tag);

}  // namespace loom
