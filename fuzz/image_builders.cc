// File: fuzz/image_builders.cc
// PNG files from chunks and BMP files from header fields.
#include "fuzz/image_builders.h"

#include <zlib.h>

#include <algorithm>

namespace loom::fuzz {

namespace {

void append_be32(std::vector<uint8_t>& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(value >> shift));
}

void append_le(std::vector<uint8_t>& out, uint32_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// Packs one sample of `depth` bits at sample position `x` of `row`.
void put_sample(std::vector<uint8_t>& row, uint64_t x, int depth, uint8_t sample) {
  const uint64_t bit = x * static_cast<uint64_t>(depth);
  const int shift = 8 - depth - static_cast<int>(bit % 8);
  const uint8_t mask = static_cast<uint8_t>((1 << depth) - 1);
  row[bit / 8] = static_cast<uint8_t>(row[bit / 8] | ((sample & mask) << shift));
}

}  // namespace

std::vector<uint8_t> png_file(const std::vector<PngChunk>& chunks) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  for (const PngChunk& chunk : chunks) {
    append_be32(out, static_cast<uint32_t>(chunk.data.size()));
    const size_t typed = out.size();
    for (size_t i = 0; i < 4; ++i) out.push_back(i < chunk.type.size() ? chunk.type[i] : ' ');
    out.insert(out.end(), chunk.data.begin(), chunk.data.end());
    append_be32(out, static_cast<uint32_t>(crc32(0, out.data() + typed, out.size() - typed)));
  }
  return out;
}

std::vector<uint8_t> png_header(uint32_t width, uint32_t height, uint8_t depth, uint8_t color,
                                uint8_t interlace) {
  std::vector<uint8_t> out;
  append_be32(out, width);
  append_be32(out, height);
  out.insert(out.end(), {depth, color, 0, 0, interlace});
  return out;
}

std::vector<uint8_t> zlib_compressed(std::span<const uint8_t> bytes) {
  uLongf size = compressBound(static_cast<uLong>(bytes.size()));
  std::vector<uint8_t> out(size);
  if (compress(out.data(), &size, bytes.data(), static_cast<uLong>(bytes.size())) != Z_OK) return {};
  out.resize(size);
  return out;
}

std::vector<uint8_t> png_rows(uint32_t width, uint32_t height, int depth,
                              std::span<const uint8_t> samples, bool interlaced) {
  constexpr uint32_t x0[] = {0, 4, 0, 2, 0, 1, 0}, y0[] = {0, 0, 4, 0, 2, 0, 1};
  constexpr uint32_t dx[] = {8, 8, 4, 4, 2, 2, 1}, dy[] = {8, 8, 8, 4, 4, 2, 2};
  std::vector<uint8_t> out;
  for (int p = 0; p < (interlaced ? 7 : 1); ++p) {
    const uint32_t first_x = interlaced ? x0[p] : 0, first_y = interlaced ? y0[p] : 0;
    const uint32_t step_x = interlaced ? dx[p] : 1, step_y = interlaced ? dy[p] : 1;
    for (uint32_t y = first_y; y < height; y += step_y) {
      const uint64_t columns = width > first_x ? (width - first_x + step_x - 1) / step_x : 0;
      if (columns == 0) break;
      std::vector<uint8_t> row((columns * depth + 7) / 8, 0);
      for (uint64_t i = 0; i < columns; ++i) {
        const uint64_t at = static_cast<uint64_t>(y) * width + first_x + i * step_x;
        put_sample(row, i, depth, at < samples.size() ? samples[at] : 0);
      }
      out.push_back(0);  // filter: none
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  return out;
}

std::vector<uint8_t> bmp_file(const BmpSpec& spec) {
  const bool core = spec.header_size == 12;
  const size_t entry_bytes = core ? 3 : 4;
  const size_t entries = spec.palette_rgb.size() / 3;
  const bool masks_after = spec.header_size == 40 || spec.header_size == 56;
  const size_t mask_bytes = masks_after ? 4 * spec.masks.size() : 0;
  const uint32_t offset =
      static_cast<uint32_t>(14 + spec.header_size + mask_bytes + entry_bytes * entries);
  std::vector<uint8_t> out = {'B', 'M'};
  append_le(out, offset + static_cast<uint32_t>(spec.pixels.size()), 4);
  append_le(out, 0, 4);
  append_le(out, offset + static_cast<uint32_t>(spec.offset_shift), 4);
  append_le(out, spec.header_size, 4);
  append_le(out, static_cast<uint32_t>(spec.width), core ? 2 : 4);
  append_le(out, static_cast<uint32_t>(spec.height), core ? 2 : 4);
  append_le(out, 1, 2);  // planes
  append_le(out, spec.bits, 2);
  if (!core) {
    append_le(out, spec.compression, 4);
    append_le(out, static_cast<uint32_t>(spec.pixels.size()), 4);
    for (int i = 0; i < 4; ++i) append_le(out, 0, 4);  // resolution, colours used and important
    std::vector<uint8_t> rest(spec.header_size - 40, 0);  // V4/V5 fields: masks first
    for (size_t m = 0; !masks_after && m < spec.masks.size() && 4 * m + 4 <= rest.size(); ++m) {
      for (int i = 0; i < 4; ++i) rest[4 * m + i] = static_cast<uint8_t>(spec.masks[m] >> (8 * i));
    }
    out.insert(out.end(), rest.begin(), rest.end());
  }
  for (size_t m = 0; masks_after && m < spec.masks.size(); ++m) append_le(out, spec.masks[m], 4);
  for (size_t e = 0; e < entries; ++e) {
    for (int c = 2; c >= 0; --c) out.push_back(spec.palette_rgb[3 * e + c]);  // BGR
    if (!core) out.push_back(0);
  }
  out.insert(out.end(), spec.pixels.begin(), spec.pixels.end());
  return out;
}

std::vector<uint8_t> bmp_rows(uint32_t width, uint32_t height, int bits,
                              std::span<const uint8_t> samples) {
  const uint64_t row_bytes = (static_cast<uint64_t>(width) * bits + 31) / 32 * 4;
  std::vector<uint8_t> out;
  for (uint32_t y = 0; y < height; ++y) {
    std::vector<uint8_t> row(row_bytes, 0);
    for (uint32_t x = 0; x < width; ++x) {
      const uint64_t at = static_cast<uint64_t>(y) * width + x;
      put_sample(row, x, bits, at < samples.size() ? samples[at] : 0);
    }
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace loom::fuzz
