// File: fuzz/structured_input.cc
// Readers and writers of the structure-aware image fuzzers' input formats.
#include "fuzz/structured_input.h"

#include <algorithm>
#include <array>
#include <string>

#include "data/stb_config.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace loom::fuzz {

namespace {

// The fuzzer's bytes, read front to back; past the end, zeros.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size(); }
  uint8_t byte() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }
  uint32_t be16() { return (uint32_t{byte()} << 8) | byte(); }
  uint32_t le16() { return byte() | (uint32_t{byte()} << 8); }
  uint32_t le32() { return le16() | (le16() << 16); }
  std::vector<uint8_t> take(size_t n) {
    n = std::min(n, bytes_.size() - std::min(at_, bytes_.size()));
    std::vector<uint8_t> out(bytes_.begin() + at_, bytes_.begin() + at_ + n);
    at_ += n;
    return out;
  }
  std::vector<uint8_t> rest() { return take(bytes_.size()); }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

void put_be16(std::vector<uint8_t>& out, size_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

void put_le(std::vector<uint8_t>& out, uint32_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

constexpr std::array<const char*, 7> kPngTypes = {"IHDR", "PLTE", "IDAT", "tRNS",
                                                   "IEND", "CgBI", "tEXt"};
constexpr std::array<uint32_t, 5> kBmpHeaders = {12, 40, 56, 108, 124};
constexpr std::array<uint16_t, 6> kBmpBits = {1, 4, 8, 16, 24, 32};

bool has_no_length(uint8_t code) { return code == 0x01 || (code >= 0xD0 && code <= 0xD9); }

}  // namespace

std::optional<data::DecodedPixels> decode_for_fuzzing(const StructuredImage& image) {
  data::screen_image(image.encoded, "fuzz");
  int width = 0, height = 0, channels = 0;
  const bool known = stbi_info_from_memory(image.encoded.data(),
                                           static_cast<int>(image.encoded.size()), &width,
                                           &height, &channels) != 0;
  if (known && int64_t{width} * height > kMaxFuzzPixels) return std::nullopt;
  return data::decode_screened(image.encoded, "fuzz", image.channels);
}

StructuredImage png_from_input(std::span<const uint8_t> input) {
  Reader in(input);
  const uint8_t mode = in.byte();
  std::vector<PngChunk> chunks;
  bool ended = false;
  while (!in.done()) {
    const uint8_t kind = in.byte();
    PngChunk chunk;
    if (kind < kPngTypes.size()) {
      chunk.type = kPngTypes[kind];
    } else {
      for (uint8_t b : in.take(4)) chunk.type += static_cast<char>(b);
    }
    chunk.data = in.take(in.be16());
    if (chunk.type == "IDAT" && (mode & 2)) chunk.data = zlib_compressed(chunk.data);
    ended |= chunk.type == "IEND";
    chunks.push_back(std::move(chunk));
  }
  if (!ended) chunks.push_back({"IEND", {}});
  return {(mode & 1) ? 3 : 1, png_file(chunks)};
}

std::vector<uint8_t> png_input(const std::vector<PngChunk>& chunks, bool compress, int channels) {
  std::vector<uint8_t> out = {static_cast<uint8_t>((channels == 3 ? 1 : 0) | (compress ? 2 : 0))};
  for (const PngChunk& chunk : chunks) {
    const auto known = std::find(kPngTypes.begin(), kPngTypes.end(), chunk.type);
    out.push_back(static_cast<uint8_t>(known - kPngTypes.begin()));
    if (known == kPngTypes.end()) out.insert(out.end(), chunk.type.begin(), chunk.type.end());
    put_be16(out, chunk.data.size());
    out.insert(out.end(), chunk.data.begin(), chunk.data.end());
  }
  return out;
}

StructuredImage bmp_from_input(std::span<const uint8_t> input) {
  Reader in(input);
  const uint8_t mode = in.byte();
  BmpSpec spec;
  spec.header_size = kBmpHeaders[in.byte() % kBmpHeaders.size()];
  spec.width = static_cast<int16_t>(in.le16());
  spec.height = static_cast<int16_t>(in.le16());
  spec.bits = kBmpBits[in.byte() % kBmpBits.size()];
  const uint8_t compression = in.byte() % 6;
  spec.compression = compression == 5 ? kNegativeCompression : compression;
  spec.palette_rgb = in.take(3 * size_t{in.byte()});
  for (uint8_t m = in.byte() % 5; m > 0; --m) spec.masks.push_back(in.le32());
  spec.offset_shift = static_cast<int8_t>(in.byte());
  spec.pixels = in.rest();
  return {(mode & 1) ? 3 : 1, bmp_file(spec)};
}

std::vector<uint8_t> bmp_input(const BmpSpec& spec, int channels) {
  std::vector<uint8_t> out = {static_cast<uint8_t>(channels == 3 ? 1 : 0)};
  out.push_back(static_cast<uint8_t>(
      std::find(kBmpHeaders.begin(), kBmpHeaders.end(), spec.header_size) - kBmpHeaders.begin()));
  put_le(out, static_cast<uint32_t>(spec.width), 2);
  put_le(out, static_cast<uint32_t>(spec.height), 2);
  out.push_back(static_cast<uint8_t>(
      std::find(kBmpBits.begin(), kBmpBits.end(), spec.bits) - kBmpBits.begin()));
  out.push_back(static_cast<uint8_t>(spec.compression == kNegativeCompression ? 5 : spec.compression));
  out.push_back(static_cast<uint8_t>(spec.palette_rgb.size() / 3));
  out.insert(out.end(), spec.palette_rgb.begin(), spec.palette_rgb.end());
  out.push_back(static_cast<uint8_t>(spec.masks.size()));
  for (uint32_t mask : spec.masks) put_le(out, mask, 4);
  out.push_back(static_cast<uint8_t>(spec.offset_shift));
  out.insert(out.end(), spec.pixels.begin(), spec.pixels.end());
  return out;
}

StructuredImage jpeg_from_input(std::span<const uint8_t> input) {
  Reader in(input);
  const uint8_t mode = in.byte();
  std::vector<uint8_t> jpeg = {0xFF, 0xD8};
  while (!in.done()) {
    const uint8_t code = in.byte();
    const std::vector<uint8_t> payload = in.take(in.be16());
    if (code != 0x00) {
      jpeg.insert(jpeg.end(), {0xFF, code});
      if (!has_no_length(code)) put_be16(jpeg, payload.size() + 2);
    }
    jpeg.insert(jpeg.end(), payload.begin(), payload.end());
  }
  if (!(mode & 2)) jpeg.insert(jpeg.end(), {0xFF, 0xD9});
  return {(mode & 1) ? 3 : 1, jpeg};
}

std::vector<uint8_t> jpeg_input(const std::vector<JpegSegment>& segments, bool end_marker,
                                int channels) {
  std::vector<uint8_t> out = {static_cast<uint8_t>((channels == 3 ? 1 : 0) | (end_marker ? 0 : 2))};
  for (const JpegSegment& segment : segments) {
    out.push_back(segment.code);
    put_be16(out, segment.payload.size());
    out.insert(out.end(), segment.payload.begin(), segment.payload.end());
  }
  return out;
}

std::vector<JpegSegment> jpeg_segments(std::span<const uint8_t> jpeg) {
  std::vector<JpegSegment> segments;
  size_t pos = 2;  // after SOI
  constexpr size_t kMaxPayload = 0xFFFF;
  while (pos + 1 < jpeg.size()) {
    const uint8_t code = jpeg[pos + 1];
    if (jpeg[pos] != 0xFF || code == 0x00) {  // entropy-coded data up to the next marker
      const size_t start = pos;
      while (pos + 1 < jpeg.size() && pos - start < kMaxPayload &&
             !(jpeg[pos] == 0xFF && jpeg[pos + 1] != 0x00)) {
        ++pos;
      }
      segments.push_back({0x00, {jpeg.begin() + start, jpeg.begin() + pos}});
    } else if (code == 0xFF) {
      ++pos;  // a fill byte
    } else if (code == 0xD9) {
      break;
    } else if (has_no_length(code)) {
      segments.push_back({code, {}});
      pos += 2;
    } else {
      const size_t length = pos + 4 <= jpeg.size() ? (size_t{jpeg[pos + 2]} << 8) | jpeg[pos + 3] : 0;
      if (length < 2 || pos + 2 + length > jpeg.size()) break;  // not a file this reads
      segments.push_back({code, {jpeg.begin() + pos + 4, jpeg.begin() + pos + 2 + length}});
      pos += 2 + length;
    }
  }
  return segments;
}

}  // namespace loom::fuzz
