// File: fuzz/bmp_fuzzer.cc
// BMP images built from the fuzzer's bytes (fuzz/structured_input.h: lengths
// and checksums made right, so mutations reach the structure), decoded as the
// image-folder reader does: Loom's screening, then stb_image (decode_for_fuzzing).
#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/structured_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::fuzz::decode_for_fuzzing(loom::fuzz::bmp_from_input({data, size}));
  } catch (const loom::Error&) {
  }
  return 0;
}
