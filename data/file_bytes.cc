// File: data/file_bytes.cc
// Whole-file reads (plain or gzip) and writes for the dataset readers.
#include "data/file_bytes.h"

#include <fmt/format.h>
#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/input_file.h"

namespace loom::data {

namespace {

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

File open_file(const std::string& path, const char* mode, std::string_view tag) {
  File file(std::fopen(path.c_str(), mode));
  LOOM_CHECK(file != nullptr, IoError, "[{}] {}: cannot open: {}", tag, path, std::strerror(errno));
  return file;
}

// How many bytes the decompressed contents may have, and why: the reader's cap,
// or what the file's own header declares (PrefixCheck).
struct Limit {
  uint64_t bytes;
  bool declared;
};

[[noreturn]] void over_limit(const std::string& path, std::string_view tag, Limit limit) {
  throw IoError(fmt::format(
      "[{}] {}: decompresses to more than the {} bytes {}", tag, path, limit.bytes,
      limit.declared ? "its header declares (more data follows the payload)"
                     : "this reader accepts"));
}

// Inflates the gzip members of `packed` with zlib, streaming, until the stream
// ends or at least `stop_after` bytes are out; zlib checks each member's CRC and
// length. The reference path: it names the offset of corrupt data and tells a
// truncated stream from a corrupt one, which libdeflate does not.
std::vector<uint8_t> zlib_gunzip(std::span<const uint8_t> packed, const std::string& path,
                                 std::string_view tag, Limit limit, uint64_t stop_after) {
  z_stream stream{};
  LOOM_CHECK(inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK, IoError,
             "[{}] {}: zlib could not start inflating", tag, path);
  std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&stream, inflateEnd);
  stream.next_in = const_cast<Bytef*>(packed.data());
  stream.avail_in = static_cast<uInt>(packed.size());  // the readers' caps keep this < 4 GiB
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  while (true) {
    stream.next_out = chunk;
    stream.avail_out = sizeof(chunk);
    const int status = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = sizeof(chunk) - stream.avail_out;
    if (produced > limit.bytes - bytes.size()) over_limit(path, tag, limit);
    bytes.insert(bytes.end(), chunk, chunk + produced);
    const bool ended = status == Z_STREAM_END && stream.avail_in == 0;
    if (ended || bytes.size() >= stop_after) return bytes;
    if (status == Z_STREAM_END) {
      inflateReset(&stream);  // another gzip member follows
      continue;
    }
    // There is always room for output, so a buffer error means the input ran out.
    LOOM_CHECK(status != Z_BUF_ERROR, IoError,
               "[{}] {}: gzip stream is truncated: it ends after {} compressed bytes without "
               "its end-of-stream marker",
               tag, path, packed.size());
    LOOM_CHECK(status == Z_OK, IoError, "[{}] {}: corrupt gzip data at compressed offset {}: {}",
               tag, path, packed.size() - stream.avail_in,
               stream.msg ? stream.msg : zError(status));
  }
}

struct DecompressorFree {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// The first guess at the decompressed size: the last member's ISIZE trailer
// (exact for the usual single-member file) when it is a plausible ratio of the
// compressed size, else 4x that size; at most the cap. In a truncated file the
// trailer is compressed data, and trusting it would allocate and zero up to the
// cap before the error. Only a buffer size: libdeflate checks every member's own
// CRC and ISIZE, and a wrong guess costs one more try, never a wrong result.
uint64_t initial_capacity(std::span<const uint8_t> packed, uint64_t max_bytes) {
  constexpr uint64_t kPlausibleRatio = 16;
  const uint64_t fallback = uint64_t{4} * packed.size();
  uint64_t trailer = 0;
  if (packed.size() >= 4) {
    const uint8_t* p = packed.data() + packed.size() - 4;
    trailer = uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
  }
  const bool plausible = trailer <= kPlausibleRatio * packed.size();
  return std::min(plausible ? std::max(trailer, fallback) : fallback, max_bytes);
}

// Every member with libdeflate, whole-buffer, into one growing buffer; about
// 2.5x faster than zlib. Output past the limit is an error at once (inflating
// again with zlib would only reach the limit a second time). Empty when a
// member is not valid gzip: the caller then lets zlib name the problem.
std::optional<std::vector<uint8_t>> fast_gunzip(std::span<const uint8_t> packed,
                                                const std::string& path, std::string_view tag,
                                                Limit limit) {
  std::unique_ptr<libdeflate_decompressor, DecompressorFree> decompressor(
      libdeflate_alloc_decompressor());
  if (!decompressor) return std::nullopt;
  std::vector<uint8_t> bytes(initial_capacity(packed, limit.bytes));
  size_t in = 0, out = 0;
  while (in < packed.size()) {
    size_t read = 0, written = 0;
    const libdeflate_result status = libdeflate_gzip_decompress_ex(
        decompressor.get(), packed.data() + in, packed.size() - in, bytes.data() + out,
        bytes.size() - out, &read, &written);
    if (status == LIBDEFLATE_INSUFFICIENT_SPACE) {
      if (bytes.size() >= limit.bytes) over_limit(path, tag, limit);
      bytes.resize(std::min<uint64_t>(uint64_t{2} * bytes.size() + (1 << 16), limit.bytes));
      continue;  // the same member again, with room
    }
    if (status != LIBDEFLATE_SUCCESS) return std::nullopt;
    in += read;
    out += written;
  }
  bytes.resize(out);
  return bytes;
}

std::vector<uint8_t> gunzip(std::span<const uint8_t> packed, const std::string& path,
                            std::string_view tag, uint64_t max_bytes, const PrefixCheck& prefix) {
  Limit limit{max_bytes, false};
  if (prefix.check) {
    const uint64_t declared =
        prefix.check(zlib_gunzip(packed, path, tag, limit, prefix.bytes));
    if (declared < max_bytes) limit = {declared, true};
  }
  if (std::optional<std::vector<uint8_t>> bytes = fast_gunzip(packed, path, tag, limit)) {
    return *std::move(bytes);
  }
  return zlib_gunzip(packed, path, tag, limit, std::numeric_limits<uint64_t>::max());
}

void write_gzip(const std::string& path, std::span<const uint8_t> bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  LOOM_CHECK(file != nullptr, IoError, "[write] {}: cannot open for writing: {}", path,
             std::strerror(errno));
  const int written = bytes.empty() ? 0 : gzwrite(file, bytes.data(), unsigned(bytes.size()));
  const int closed = gzclose(file);
  LOOM_CHECK(written == static_cast<int>(bytes.size()) && closed == Z_OK, IoError,
             "[write] {}: gzip write failed", path);
}

}  // namespace

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool starts_with_gzip_magic(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B;
}

std::string hex_prefix(std::span<const uint8_t> bytes, size_t count) {
  std::string text;
  for (size_t i = 0; i < std::min(count, bytes.size()); ++i) {
    text += fmt::format("{}{:02X}", i == 0 ? "" : " ", bytes[i]);
  }
  return text;
}

std::vector<uint8_t> read_file_bytes(const std::string& path, std::string_view tag,
                                     uint64_t max_bytes, const PrefixCheck& prefix) {
  if (!ends_with(path, ".gz")) return read_regular_file(path, tag, max_bytes);
  // A gzip stream shrinks image data at most ~1000x; the output cap is what matters.
  std::vector<uint8_t> packed = read_regular_file(path, tag, max_bytes);
  return gunzip_bytes(packed, path, tag, max_bytes, prefix);
}

std::vector<uint8_t> read_stored_bytes(const std::string& path, std::string_view tag,
                                       uint64_t max_bytes) {
  return read_regular_file(path, tag, max_bytes);
}

std::vector<uint8_t> gunzip_bytes(std::span<const uint8_t> packed, const std::string& path,
                                  std::string_view tag, uint64_t max_bytes,
                                  const PrefixCheck& prefix) {
  LOOM_CHECK(starts_with_gzip_magic(packed), IoError,
             "[{}] {}: named .gz but is not gzip data (starts {}; gzip starts 1F 8B); "
             "rename it without .gz if it is already decompressed",
             tag, path, packed.empty() ? "empty" : hex_prefix(packed, 4));
  LOOM_CHECK(packed.size() <= std::numeric_limits<uInt>::max(), IoError,
             "[{}] {}: {} compressed bytes are more than zlib takes in one call", tag, path,
             packed.size());
  return gunzip(packed, path, tag, max_bytes, prefix);
}

void write_file_bytes(const std::string& path, std::span<const uint8_t> bytes, bool gzip) {
  if (gzip) return write_gzip(path, bytes);
  File file = open_file(path, "wb", "write");
  if (bytes.empty()) return;  // fwrite's buffer may not be null, even for 0 bytes
  LOOM_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size(), IoError,
             "[write] {}: write failed: {}", path, std::strerror(errno));
}

}  // namespace loom::data
