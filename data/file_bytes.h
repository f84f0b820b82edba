// File: data/file_bytes.h
// Whole-file reads and writes for the dataset readers, with gzip through zlib.
// Errors are loom::IoError of the form "[tag] path: what went wrong", so every
// reader reports the file the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// The bytes of `path`; a name ending in ".gz" is decompressed (concatenated
// gzip members included, CRCs checked). Throws IoError when the file cannot be
// opened or read, is named .gz but is not gzip data, is a truncated or corrupt
// gzip stream, or holds more than `max_bytes` (after decompression).
std::vector<uint8_t> read_file_bytes(const std::string& path, std::string_view tag,
                                     uint64_t max_bytes);

// Writes `bytes` to `path`, gzip-compressed when `gzip` is true. Throws IoError.
void write_file_bytes(const std::string& path, std::span<const uint8_t> bytes, bool gzip);

// True when `bytes` starts with the gzip magic 1F 8B.
bool starts_with_gzip_magic(std::span<const uint8_t> bytes);
bool ends_with(std::string_view text, std::string_view suffix);

// "1F 8B 08 00": the first `count` bytes in hex, for error messages.
std::string hex_prefix(std::span<const uint8_t> bytes, size_t count);

}  // namespace loom::data
