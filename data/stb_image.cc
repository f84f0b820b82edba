// File: data/stb_image.cc
// The one translation unit that compiles stb_image (Debian's libstb-dev):
// PNG, JPEG and BMP decoders only, no stdio (images are decoded from memory
// after a checked read), and a dimension cap so a hostile header cannot ask for
// gigabytes. Every allocation is zeroed: a JPEG scan may use a Huffman table
// that no DHT segment defined, and v2.27 then decodes through uninitialised
// tables and can index far outside them (v2.28 memsets its decoder state). In
// zeroed tables every code decodes to symbol 0, harmlessly. And every
// allocation is capped: stb inflates a PNG's whole zlib stream, however far it
// expands past the image (a 64 MiB file could ask for 64 GiB). See
// data/stb_guard.h for the other 2.27 bugs Loom screens for. stb's own code is
// not ours to fix, so its warnings are silenced.
#include <cstddef>
#include <cstdlib>

namespace {

// The largest buffer a valid image of at most 4096 x 4096 pixels needs: a
// 16-bit RGBA PNG's pixels (128 MiB), or its inflated rows (as much and a
// byte per row). stb reports a refused allocation as "outofmem".
constexpr size_t kMaxStbAllocation = size_t{256} << 20;

void* stb_allocate(size_t bytes) {
  return bytes > kMaxStbAllocation ? nullptr : std::calloc(1, bytes);
}

void* stb_reallocate(void* pointer, size_t bytes) {
  return bytes > kMaxStbAllocation ? nullptr : std::realloc(pointer, bytes);
}

}  // namespace

#define STB_IMAGE_IMPLEMENTATION
#define STBI_MALLOC(bytes) stb_allocate(bytes)
#define STBI_REALLOC(pointer, bytes) stb_reallocate(pointer, bytes)
#define STBI_FREE(pointer) std::free(pointer)
#include "data/stb_config.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop
