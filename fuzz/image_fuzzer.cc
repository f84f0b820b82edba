// File: fuzz/image_fuzzer.cc
// Image decoding as the image-folder reader does it, from any bytes: Loom's
// screening, then stb_image (PNG, JPEG, BMP) through decode_for_fuzzing. The
// first byte picks gray or RGB output.
#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/structured_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    loom::fuzz::decode_for_fuzzing({(data[0] & 1) ? 3 : 1, {data + 1, data + size}});
  } catch (const loom::Error&) {
  }
  return 0;
}
