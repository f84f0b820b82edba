// File: data/stb_image.cc
// The one translation unit that compiles stb_image (Debian's libstb-dev):
// PNG, JPEG and BMP decoders only, no stdio (images are decoded from memory
// after a checked read), and a dimension cap so a hostile header cannot ask for
// gigabytes. Every allocation is zeroed: a JPEG scan may use a Huffman table
// that no DHT segment defined, and v2.27 then decodes through uninitialised
// tables and can index far outside them (v2.28 memsets its decoder state). In
// zeroed tables every code decodes to symbol 0, harmlessly. See
// data/stb_guard.h for the other 2.27 bug Loom screens for. stb's own code is
// not ours to fix, so its warnings are silenced.
#include <cstdlib>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_MALLOC(bytes) std::calloc(1, bytes)
#define STBI_REALLOC(pointer, bytes) std::realloc(pointer, bytes)
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
