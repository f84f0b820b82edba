// File: fuzz/image_fuzzer.cc
// Image decoding as the image-folder reader does it: Loom's screening, then
// stb_image (PNG, JPEG, BMP). The first byte picks gray or RGB output.
#include "core/error.h"
#include "data/image_folder.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    loom::data::decode_image({data + 1, size - 1}, "fuzz.img", (data[0] & 1) ? 3 : 1);
  } catch (const loom::Error&) {
  }
  return 0;
}
