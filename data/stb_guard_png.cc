// File: data/stb_guard_png.cc
// The PNG screen: walks the chunks to IEND (none may be cut off), and for an
// indexed image inflates its pixel data with stb's own zlib decoder (so it
// sees the bytes stb will see), undoes the row filters and checks every
// palette index against the palette.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/stb_config.h"
#include "data/stb_guard.h"
#include "data/stb_guard_internal.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

// W, H image size (pixels)
namespace loom::data {

namespace {

using stb_guard_internal::be32;

constexpr size_t kSignatureBytes = 8;
constexpr uint32_t kIndexedColor = 3;

// What the chunk walk found.
struct PngChunks {
  // stb decodes only files whose first chunk, CgBI chunks aside, is IHDR.
  bool header_first = false, other_chunk_seen = false;
  uint32_t width = 0, height = 0, depth = 0, color = 0, interlace = 0;
  int palettes = 0;
  std::optional<int64_t> palette_entries;  // of a valid PLTE before the first IDAT
  bool iphone = false;           // CgBI: raw deflate, no zlib header
  bool idat_seen = false;
  std::vector<uint8_t> data;     // the IDAT chunks' bytes, in order
};

std::string chunk_name(std::span<const uint8_t> png, size_t at) {
  return std::string(png.begin() + static_cast<std::ptrdiff_t>(at),
                     png.begin() + static_cast<std::ptrdiff_t>(at + 4));
}

void note_chunk(std::span<const uint8_t> png, size_t at, const std::string& path,
                PngChunks& chunks) {
  const uint32_t length = be32(png, at);
  const std::string type = chunk_name(png, at + 4);
  const std::span<const uint8_t> body = png.subspan(at + 8, length);
  if (type == "CgBI") {
    chunks.iphone = true;
    return;
  }
  const bool first = !std::exchange(chunks.other_chunk_seen, true);
  if (type == "IHDR" && first && length == 13) {
    chunks.header_first = true;
    chunks.width = be32(body, 0);
    chunks.height = be32(body, 4);
    chunks.depth = body[8];
    chunks.color = body[9];
    chunks.interlace = body[12];
  } else if (type == "PLTE") {
    LOOM_CHECK(++chunks.palettes == 1, IoError,
               "[image_folder] {}: corrupt PNG: a second PLTE chunk at offset {} (a PNG has at "
               "most one palette)",
               path, at);
    const bool valid = length % 3 == 0 && length <= 256 * 3;
    if (valid && !chunks.idat_seen) chunks.palette_entries = length / 3;
  } else if (type == "IDAT") {
    // stb copies each IDAT into a buffer it allocates for the first non-empty
    // one; before that the buffer is null, and copying 0 bytes to it is
    // memcpy(nullptr, ...): undefined behaviour (UBSan stops there).
    LOOM_CHECK(chunks.idat_seen || length > 0, IoError,
               "[image_folder] {}: PNG: the first IDAT chunk, at offset {}, is empty; stb_image "
               "2.27 copies it to a null pointer (undefined behaviour), so Loom refuses it: save "
               "the image again without the empty chunk",
               path, at);
    chunks.idat_seen = true;
    chunks.data.insert(chunks.data.end(), body.begin(), body.end());
  }
}

// The bytes of one reduced image (an Adam7 pass, or the whole image): a filter
// byte, then the packed indices, per row.
uint64_t row_bytes(uint64_t width, uint32_t depth) { return (width * depth + 7) / 8; }

struct Pass {
  uint64_t width, height;
};

std::vector<Pass> passes(const PngChunks& c) {
  if (c.interlace == 0) return {{c.width, c.height}};
  constexpr int x0[] = {0, 4, 0, 2, 0, 1, 0}, y0[] = {0, 0, 4, 0, 2, 0, 1};
  constexpr int dx[] = {8, 8, 4, 4, 2, 2, 1}, dy[] = {8, 8, 8, 4, 4, 2, 2};
  std::vector<Pass> out;
  for (int p = 0; p < 7; ++p) {
    const uint64_t w = (c.width - x0[p] + dx[p] - 1) / dx[p];
    const uint64_t h = (c.height - y0[p] + dy[p] - 1) / dy[p];
    if (w > 0 && h > 0) out.push_back({w, h});  // stb skips empty passes, as the format does
  }
  return out;
}

uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

// Undoes a row's filter in place (one byte per filter unit: indexed pixels);
// `prior` is the previous row's result, zeros for a pass's first row. False
// for a filter type stb rejects.
bool unfilter(std::span<uint8_t> row, std::span<const uint8_t> prior, uint8_t filter) {
  for (size_t i = 0; i < row.size(); ++i) {
    const int left = i > 0 ? row[i - 1] : 0, up = prior[i], up_left = i > 0 ? prior[i - 1] : 0;
    switch (filter) {
      case 0: break;
      case 1: row[i] = static_cast<uint8_t>(row[i] + left); break;
      case 2: row[i] = static_cast<uint8_t>(row[i] + up); break;
      case 3: row[i] = static_cast<uint8_t>(row[i] + (left + up) / 2); break;
      case 4: row[i] = static_cast<uint8_t>(row[i] + paeth(left, up, up_left)); break;
      default: return false;
    }
  }
  return true;
}

// The index of pixel `x` of a row of `depth`-bit indices.
int index_at(std::span<const uint8_t> row, uint64_t x, uint32_t depth) {
  const uint64_t bit = x * depth;
  return (row[bit / 8] >> (8 - depth - bit % 8)) & ((1 << depth) - 1);
}

struct StbFree {
  void operator()(char* bytes) const { stbi_image_free(bytes); }
};

// Every index of every pass against the palette. Returns early, leaving the
// error to stb, where stb fails anyway: data that does not inflate, too little
// of it, or an unknown filter type.
void check_indices(const PngChunks& c, const std::string& path) {
  uint64_t needed = 0;
  for (const Pass& p : passes(c)) needed += (row_bytes(p.width, c.depth) + 1) * p.height;
  int inflated_size = 0;
  std::unique_ptr<char, StbFree> inflated(stbi_zlib_decode_malloc_guesssize_headerflag(
      reinterpret_cast<const char*>(c.data.data()), static_cast<int>(c.data.size()),
      static_cast<int>(needed), &inflated_size, c.iphone ? 0 : 1));
  if (!inflated || static_cast<uint64_t>(inflated_size) < needed) return;
  auto* bytes = reinterpret_cast<uint8_t*>(inflated.get());
  for (const Pass& p : passes(c)) {
    const size_t stride = row_bytes(p.width, c.depth);
    std::vector<uint8_t> zeros(stride, 0);
    std::span<const uint8_t> prior = zeros;
    for (uint64_t y = 0; y < p.height; ++y, bytes += stride + 1) {
      const std::span<uint8_t> row(bytes + 1, stride);
      if (!unfilter(row, prior, bytes[0])) return;
      prior = row;
      for (uint64_t x = 0; x < p.width; ++x) {
        const int index = index_at(row, x, c.depth);
        LOOM_CHECK(index < *c.palette_entries, IoError,
                   "[image_folder] {}: corrupt PNG: a pixel uses palette entry {}, but the PLTE "
                   "chunk has {} entries (stb_image would read uninitialised memory)",
                   path, index, *c.palette_entries);
      }
    }
  }
}

bool indexed_image_stb_decodes(const PngChunks& c) {
  const bool depth_ok = c.depth == 1 || c.depth == 2 || c.depth == 4 || c.depth == 8;
  const bool size_ok = c.width > 0 && c.height > 0 && c.width <= STBI_MAX_DIMENSIONS &&
                       c.height <= STBI_MAX_DIMENSIONS;
  return c.header_first && c.color == kIndexedColor && depth_ok && size_ok && c.interlace <= 1 &&
         c.palette_entries.value_or(0) > 0 && c.idat_seen;
}

}  // namespace

void screen_png(std::span<const uint8_t> png, const std::string& path) {
  if (image_format(png) != ImageFormat::Png) return;
  PngChunks chunks;
  size_t at = kSignatureBytes;
  while (true) {
    LOOM_CHECK(at + 8 <= png.size(), IoError,
               "[image_folder] {}: truncated PNG: the file ends at offset {} inside a chunk "
               "header, before the IEND chunk",
               path, png.size());
    const uint64_t length = be32(png, at);
    const uint64_t end = at + 12 + length;  // length, type, data, CRC
    LOOM_CHECK(end <= png.size(), IoError,
               "[image_folder] {}: truncated PNG: chunk '{}' at offset {} needs {} bytes but "
               "the file ends {} bytes later",
               path, chunk_name(png, at + 4), at, 12 + length, png.size() - at);
    if (chunk_name(png, at + 4) == "IEND") break;
    note_chunk(png, at, path, chunks);
    at = static_cast<size_t>(end);
  }
  if (indexed_image_stb_decodes(chunks)) check_indices(chunks, path);
}

}  // namespace loom::data
