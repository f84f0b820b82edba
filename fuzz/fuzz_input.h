// File: fuzz/fuzz_input.h
// What the fuzz targets share: the libFuzzer entry point's signature, and a
// file holding the input for readers that take a path (a memfd, so no disk
// I/O and nothing left behind).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace loom::fuzz {

// An anonymous in-memory file with `bytes` in it, opened by path through
// /proc/self/fd, as readers open real files.
class MemoryFile {
 public:
  explicit MemoryFile(std::span<const uint8_t> bytes);
  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace loom::fuzz
