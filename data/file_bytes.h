// File: data/file_bytes.h
// Whole-file reads and writes for the dataset readers. gzip is inflated with
// libdeflate (whole-buffer, fast) and, for the first bytes a PrefixCheck reads
// and for naming what is wrong with a bad stream, with zlib.
// Errors are loom::IoError of the form "[tag] path: what went wrong", so every
// reader reports the file the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// A look at the first bytes of a file's contents (after decompression) before
// the rest is read or inflated, so that a reader can reject a header that
// declares more than it accepts without inflating a gigabyte first. `check`
// gets at least `bytes` bytes, or all of a shorter file, throws to refuse, and
// returns the size the header declares for the whole contents (the reader's
// cap when it cannot tell): inflating stops with an error past that size.
struct PrefixCheck {
  size_t bytes = 0;
  std::function<uint64_t(std::span<const uint8_t>)> check;
};

// The bytes of `path`; a name ending in ".gz" is decompressed (concatenated
// gzip members included, CRCs checked). Throws IoError when the file cannot be
// opened or read, is not a regular file (a FIFO or a device is refused before
// anything is read: core/input_file.h), is named .gz but is not gzip data, is a truncated or corrupt
// gzip stream, or holds more than `max_bytes` (after decompression). A plain
// file's size is checked before it is read; a gzip stream's contents are
// checked by `prefix` before more than its first 64 KiB are inflated. The
// gzip ISIZE trailer only sizes the first output buffer: in a truncated stream
// those 4 bytes are compressed data, so the size they seem to declare is never
// trusted; each member's CRC and length are checked as it is inflated.
std::vector<uint8_t> read_file_bytes(const std::string& path, std::string_view tag,
                                     uint64_t max_bytes, const PrefixCheck& prefix = {});

// The bytes of `path` as stored (never decompressed), at most `max_bytes`.
std::vector<uint8_t> read_stored_bytes(const std::string& path, std::string_view tag,
                                       uint64_t max_bytes);

// The decompressed bytes of gzip data (concatenated members included, CRCs
// checked); `path` only names it in errors. Errors as read_file_bytes.
std::vector<uint8_t> gunzip_bytes(std::span<const uint8_t> packed, const std::string& path,
                                  std::string_view tag, uint64_t max_bytes,
                                  const PrefixCheck& prefix = {});

// Writes `bytes` to `path`, gzip-compressed when `gzip` is true. Throws IoError.
void write_file_bytes(const std::string& path, std::span<const uint8_t> bytes, bool gzip);

// True when `bytes` starts with the gzip magic 1F 8B.
bool starts_with_gzip_magic(std::span<const uint8_t> bytes);
bool ends_with(std::string_view text, std::string_view suffix);

// "1F 8B 08 00": the first `count` bytes in hex, for error messages.
std::string hex_prefix(std::span<const uint8_t> bytes, size_t count);

}  // namespace loom::data
