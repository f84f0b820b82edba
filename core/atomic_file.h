// File: core/atomic_file.h
// Replacing a file so that a crash never leaves it half-written: the new bytes
// go to a temporary file beside the target (<path>.tmp.<pid>.XXXXXX, ours alone
// through mkstemp and flock-ed while it is written), which commit() fsyncs,
// renames over the target, and makes durable by fsyncing the folder.
//
//   AtomicFile file("model.safetensors", "safetensors");
//   file.write(bytes.data(), bytes.size());
//   file.commit();  // without it, the destructor removes the temporary file
//
// Temporary files that killed writers left behind are removed by the next
// AtomicFile for the same path: a live writer holds its file's lock, so a file
// whose lock can be taken, and whose writer is gone or older than this
// process, is stale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace loom {

class AtomicFile {
 public:
  // Creates the temporary file for `path`. `op` names the caller in errors
  // ("[op] path: what failed: why"). Throws IoError when the folder is missing
  // or not writable; nothing is written at `path` then.
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t nbytes);

  // Data on disk before the name points at it, and the name on disk before
  // this returns. Throws IoError on failure, leaving any old file at `path`.
  void commit();

 private:
  [[noreturn]] void fail(std::string_view action) const;

  std::string path_, op_, temp_path_;
  int fd_ = -1;
  bool renamed_ = false;
};

}  // namespace loom
