// File: data/stb_guard.h
// Debian's stb_image is v2.27; v2.28 fixed memory-safety bugs that corrupt
// files can reach. Loom cannot patch stb, so it screens for them instead:
// - a JPEG DHT segment declaring more than 256 Huffman codes makes
//   stbi__build_huffman write past its tables: rejected here, before decoding;
// - a JPEG scan using a Huffman table that was never defined decodes through
//   uninitialised memory: data/stb_image.cc gives stb a zeroing allocator,
//   which has the effect of v2.28's memset of its decoder state.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace loom::data {

// Throws IoError naming `path` and the segment's offset when `encoded` is a
// JPEG with a Huffman table of more than 256 codes; does nothing otherwise
// (other formats, and other corruption, are left to stb, which reports them).
void check_jpeg_huffman_tables(std::span<const uint8_t> encoded, const std::string& path);

}  // namespace loom::data
