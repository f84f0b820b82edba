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

#include <charconv>
#include <cstdio>
#include <exception>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "training/user_path.h"

namespace {

constexpr const char* kUsage =
    "usage: safetensors_roundtrip write PATH [--seed S]\n"
    "       safetensors_roundtrip read PATH\n"
    "       safetensors_roundtrip -h | --help\n";

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

// The whole of `text` as a seed; anything else is a usage error, not seed 0.
std::optional<uint64_t> parse_seed(const std::string& text) {
  uint64_t seed = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return seed;
}

int usage_error(const std::string& problem) {
  std::fprintf(stderr, "safetensors_roundtrip: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

}  // namespace

// Nothing escapes main: usage errors exit 2, failures 1 (an uncaught exception
// would abort and lose the listing of a redirected run).
int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.size() < 2 || (args[0] != "write" && args[0] != "read")) {
    return usage_error("expected write PATH [--seed S] or read PATH");
  }
  const bool write = args[0] == "write";
  std::optional<uint64_t> seed = 0;
  if (write && args.size() == 4 && args[2] == "--seed") {
    seed = parse_seed(args[3]);
    if (!seed) return usage_error("--seed needs a whole number from 0 to 2^64-1, got '" + args[3] + "'");
  } else if (args.size() != 2) {
    return usage_error("unexpected argument '" + args[2] + "'");
  }
  const std::string path = loom::training::user_path(args[1]);
  try {
    if (write) {
      loom::save_safetensors(path, random_tensors(*seed), {{"format", "pt"}, {"writer", "loom"}});
    }
    print_listing(path);
  } catch (const loom::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "safetensors_roundtrip: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "safetensors_roundtrip: internal error: %s (a bug in Loom: please report it)\n",
                 e.what());
    return 1;
  }
  return 0;
}
