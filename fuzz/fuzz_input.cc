// File: fuzz/fuzz_input.cc
// The input file (a memfd) that the fuzz targets hand to readers that take a path.
#include "fuzz/fuzz_input.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

namespace loom::fuzz {

MemoryFile::MemoryFile(std::span<const uint8_t> bytes) {
  fd_ = ::memfd_create("loom_fuzz", MFD_CLOEXEC);
  // A harness that cannot make its input file would fuzz nothing: stop loudly.
  if (fd_ < 0) std::abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (put <= 0) std::abort();
    done += static_cast<size_t>(put);
  }
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemoryFile::~MemoryFile() { ::close(fd_); }

}  // namespace loom::fuzz
