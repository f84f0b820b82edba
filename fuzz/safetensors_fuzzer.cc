// File: fuzz/safetensors_fuzzer.cc
// Safetensors files, header and payload, through the file reader Loom uses
// (the input is a file in memory): the metadata-only reader, then a full load.
#include "core/error.h"
#include "core/serialize.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::MemoryFile file({data, size});
  try {
    loom::load_safetensors_metadata(file.path());
    loom::load_safetensors(file.path());
  } catch (const loom::Error&) {
  }
  return 0;
}
