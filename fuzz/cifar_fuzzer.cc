// File: fuzz/cifar_fuzzer.cc
// CIFAR-10 binary batches. The first byte picks strict mode and whether the
// name is an official batch name (strict mode checks those more).
#include "core/error.h"
#include "data/cifar.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool strict = data[0] & 1, official = data[0] & 2;
  try {
    loom::data::parse_cifar_batch({data + 1, size - 1}, official ? "data_batch_1.bin" : "fuzz.bin",
                                  {.strict = strict});
  } catch (const loom::Error&) {
  }
  return 0;
}
