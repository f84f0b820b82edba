// File: data/stb_guard_internal.h
// What the per-format screens of data/stb_guard share: reading integers out of
// the encoded bytes. Private to //data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace loom::data::stb_guard_internal {

// Integers at `at`; the caller has checked that the bytes are there.
inline uint32_t le16(std::span<const uint8_t> b, size_t at) { return b[at] | (b[at + 1] << 8); }
inline uint32_t le32(std::span<const uint8_t> b, size_t at) {
  return b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | (uint32_t{b[at + 3]} << 24);
}
inline uint32_t be16(std::span<const uint8_t> b, size_t at) { return (b[at] << 8) | b[at + 1]; }
inline uint32_t be32(std::span<const uint8_t> b, size_t at) {
  return (uint32_t{b[at]} << 24) | (b[at + 1] << 16) | (b[at + 2] << 8) | b[at + 3];
}

// The little-endian integer at `at` as stb reads it: bytes past the end read as 0.
inline uint32_t padded_le32(std::span<const uint8_t> b, size_t at) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value |= uint32_t{at + i < b.size() ? b[at + i] : 0u} << (8 * i);
  return value;
}

}  // namespace loom::data::stb_guard_internal
