// File: fuzz/checkpoint_fuzzer.cc
// Training checkpoints: safetensors plus CRCs and range-checked scalars.
#include "core/error.h"
#include "core/serialize.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::MemoryFile file({data, size});
  try {
    loom::load_checkpoint(file.path());
  } catch (const loom::Error&) {
  }
  return 0;
}
