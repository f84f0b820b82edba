// File: data/stb_guard.h
// Debian's stb_image is v2.27; v2.28 fixed memory-safety bugs that corrupt
// files can reach, and stb accepts some corrupt files silently. Loom cannot
// patch stb, so it screens encoded images before stb sees them:
// - a JPEG DHT segment declaring more than 256 Huffman codes makes
//   stbi__build_huffman write past its tables;
// - a JPEG scan using a Huffman table that no DHT segment defined decodes
//   through tables stb never filled (garbage pixels; v2.27 even reads
//   uninitialised memory, which data/stb_image.cc's zeroing allocator tames);
// - a BMP height of INT_MIN reaches abs(INT_MIN) in stbi__bmp_parse_header;
// - a BMP whose pixel array is shorter than its header says loads with the
//   missing pixels as 0;
// - a PNG cut off mid-chunk fails in stb with the chunk type's raw bytes as
//   the message ("IDA").
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace loom::data {

// Throws IoError naming `path`, the offset and what is wrong for the cases
// above; does nothing for other files (other formats and other corruption are
// left to stb, which reports them).
void screen_image(std::span<const uint8_t> encoded, const std::string& path);

// The JPEG part of screen_image alone.
void check_jpeg_huffman_tables(std::span<const uint8_t> encoded, const std::string& path);

}  // namespace loom::data
