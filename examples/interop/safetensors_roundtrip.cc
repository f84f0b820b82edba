// File: examples/interop/safetensors_roundtrip.cc
// Loom's half of the safetensors interop check: writes a file of random tensors
// of every dtype, or reads any safetensors file, and lists what it holds so that
// tools/safetensors_interop.py can compare with what PyTorch sees.
//
//   bazel run //examples/interop:safetensors_roundtrip -- write out.safetensors [--seed S]
//   bazel run //examples/interop:safetensors_roundtrip -- read in.safetensors
//
// Both print one tab-separated line per tensor, in file order, then the metadata:
//   tensor  <name>  <dtype code>  <shape, e.g. 3x4 or "scalar">  <sum as %.17g>  <crc32 of bytes>
//   metadata  <key>  <value>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/error.h"
#include "core/generator.h"
#include "core/serialize.h"
#include "core/tensor.h"

namespace {

constexpr const char* kUsage =
    "usage: safetensors_roundtrip write PATH [--seed S]\n"
    "       safetensors_roundtrip read PATH\n";

std::string shape_text(const loom::Shape& sizes) {
  if (sizes.empty()) return "scalar";
  std::string text;
  for (int64_t size : sizes) text += (text.empty() ? "" : "x") + std::to_string(size);
  return text;
}

void print_listing(const std::string& path) {
  for (const auto& [name, t] : loom::load_safetensors(path)) {
    double sum = 0.0;
    for (double value : t.to_vector<double>()) sum += value;
    uLong crc = crc32_z(0, static_cast<const Bytef*>(t.raw_data()),
                        t.numel() * loom::element_size(t.dtype()));
    std::string dtype(loom::safetensors_dtype(t.dtype()));
    std::printf("tensor\t%s\t%s\t%s\t%.17g\t%08lx\n", name.c_str(), dtype.c_str(),
                shape_text(t.sizes()).c_str(), sum, crc);
  }
  for (const auto& [key, value] : loom::load_safetensors_metadata(path)) {
    std::printf("metadata\t%s\t%s\n", key.c_str(), value.c_str());
  }
}

// One random tensor of every dtype, plus a 0-d and a zero-size one.
loom::StateDict random_tensors(uint64_t seed) {
  using loom::DType;
  loom::Generator gen(seed);
  return {
      {"conv.weight", loom::randn({8, 1, 3, 3}, {}, &gen)},
      {"f64", loom::randn({5}, {.dtype = DType::Float64}, &gen)},
      {"f16", loom::randn({2, 3}, {}, &gen).to(DType::Float16)},
      {"bf16", loom::randn({4, 2}, {}, &gen).to(DType::BFloat16)},
      {"i32", loom::randint(-1000, 1000, {6}, {.dtype = DType::Int32}, &gen)},
      {"bn.num_batches_tracked", loom::full({}, 937, {.dtype = DType::Int64})},
      {"u8", loom::randint(0, 256, {8}, {.dtype = DType::UInt8}, &gen)},
      {"mask", loom::randint(0, 2, {3, 3}, {}, &gen).to(DType::Bool)},
      {"scalar", loom::randn({}, {}, &gen)},
      {"empty", loom::zeros({0, 3})},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[1], "write") != 0 && std::strcmp(argv[1], "read") != 0)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string path = argv[2];
  try {
    if (std::strcmp(argv[1], "write") == 0) {
      bool seeded = argc >= 5 && std::strcmp(argv[3], "--seed") == 0;
      uint64_t seed = seeded ? std::strtoull(argv[4], nullptr, 10) : 0;
      loom::save_safetensors(path, random_tensors(seed), {{"format", "pt"}, {"writer", "loom"}});
    }
    print_listing(path);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
