// File: fuzz/bmp_fuzzer.cc
// BMP images built from the fuzzer's bytes (fuzz/structured_input.h: lengths
// and checksums made right, so mutations reach the structure), decoded as the
// image-folder reader does: Loom's screening, then stb_image.
#include "core/error.h"
#include "data/image_folder.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/structured_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const loom::fuzz::StructuredImage image = loom::fuzz::bmp_from_input({data, size});
  try {
    loom::data::decode_image(image.encoded, "fuzz.bmp", image.channels);
  } catch (const loom::Error&) {
  }
  return 0;
}
