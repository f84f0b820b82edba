// File: fuzz/make_corpus.cc
// Writes the fuzzers' seed corpus: small valid inputs of every kind, one
// folder per target (the folder layout of fuzz/corpus), each input prefixed
// with the byte that selects the harness's mode where it has one.
//
//   bazel run //fuzz:make_corpus -- "$PWD/fuzz/corpus"   (tools/fuzz_corpus.sh)
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "data/cifar.h"
#include "data/file_bytes.h"
#include "data/idx.h"
#include "tests/data/fixtures.h"

namespace fs = std::filesystem;
using namespace loom;

namespace {

void write(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<uint8_t> prefixed(uint8_t mode, std::vector<uint8_t> bytes) {
  bytes.insert(bytes.begin(), mode);
  return bytes;
}

void idx_seeds(const fs::path& out, const fs::path& scratch) {
  Generator gen(1);
  const std::vector<data::IdxArray> arrays = {
      {data::IdxType::UInt8, {3, 28, 28}, randint(0, 256, {3 * 784}, {.dtype = DType::UInt8}, &gen).to_vector<uint8_t>()},
      {data::IdxType::UInt8, {5}, {0, 1, 9, 3, 4}},
      {data::IdxType::Int16, {2, 3}, std::vector<uint8_t>(12, 7)},
      {data::IdxType::Float64, {2}, std::vector<uint8_t>(16, 0x3F)},
  };
  for (size_t i = 0; i < arrays.size(); ++i) {
    const std::vector<uint8_t> plain = data::encode_idx(arrays[i]);
    write(out / ("plain_" + std::to_string(i)), prefixed(0, plain));
    write(out / ("gzip_here_" + std::to_string(i)), prefixed(3, plain));
    const fs::path packed = scratch / "a.idx.gz";
    data::write_idx(packed.string(), arrays[i]);
    write(out / ("gzip_" + std::to_string(i)), prefixed(1, read(packed)));
  }
}

void cifar_seeds(const fs::path& out, const fs::path& scratch) {
  const data::Dataset set = data::testing::random_dataset(2, 3, 32, 32, 10, 2);
  const fs::path batch = scratch / "b.bin";
  data::write_cifar_batch(batch.string(), set);
  write(out / "two_records", prefixed(0, read(batch)));
  write(out / "two_records_strict_official", prefixed(3, read(batch)));
}

void safetensors_seeds(const fs::path& out, const fs::path& scratch) {
  Generator gen(3);
  const fs::path file = scratch / "s.safetensors";
  save_safetensors(file.string(), {{"w", randn({2, 3}, {}, &gen)},
                                   {"b", randint(0, 5, {4}, {.dtype = DType::Int64}, &gen)},
                                   {"h", randn({3}, {}, &gen).to(DType::BFloat16)},
                                   {"flag", ones({2}, {.dtype = DType::Bool})},
                                   {"empty", zeros({0, 4})}},
                   {{"format", "pt"}});
  write(out / "mixed", read(file));
  save_safetensors(file.string(), {});
  write(out / "empty", read(file));
}

void checkpoint_seeds(const fs::path& out, const fs::path& scratch) {
  Generator gen(4);
  const fs::path file = scratch / "c.ckpt";
  save_checkpoint(file.string(), {.model = {{"0.weight", randn({2, 2}, {}, &gen)}},
                                  .optimizer = {{"state.0.step", full({}, 3)}},
                                  .epoch = 2,
                                  .step = 40,
                                  .rng_seed = 7,
                                  .rng_offset = 99,
                                  .extra = {{"flag.--lr", "0.001"}}});
  write(out / "small", read(file));
}

void image_seeds(const fs::path& out) {
  Generator gen(5);
  const Tensor rgb = randint(0, 256, {3, 6, 5}, {.dtype = DType::UInt8}, &gen);
  const Tensor gray = randint(0, 256, {1, 4, 4}, {.dtype = DType::UInt8}, &gen);
  write(out / "rgb.png", prefixed(1, data::testing::encode_png(rgb)));
  write(out / "gray.png", prefixed(0, data::testing::encode_png(gray)));
  write(out / "rgb.bmp", prefixed(1, data::testing::encode_bmp(rgb)));
  write(out / "rgb.jpg", prefixed(1, data::testing::encode_jpeg(rgb, 80)));
  write(out / "gray.jpg", prefixed(0, data::testing::encode_jpeg(gray, 60)));
}

void flag_seeds(const fs::path& out) {
  const std::vector<std::string> lines = {
      "--epochs\n3\n--lr\n1e-3\n--seed\n42",
      "--device\ncpu\n--synthetic\n1000\n--metrics\nm.jsonl\n--allow-nonfinite-loss",
      "--batch-size\n64\n--label-smoothing\n0.1\n--target-accuracy\n0.9\n--limit\n500",
      "--schedule\nonecycle\n--optimizer\nsgd\n--weight-decay\n5e-4\n--save\nck.ckpt",
      "--help",
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    write(out / ("args_" + std::to_string(i)), {lines[i].begin(), lines[i].end()});
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus <fuzz/corpus folder>\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path scratch = fs::temp_directory_path() / ("loom_corpus_" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  idx_seeds(out / "idx", scratch);
  cifar_seeds(out / "cifar", scratch);
  safetensors_seeds(out / "safetensors", scratch);
  checkpoint_seeds(out / "checkpoint", scratch);
  image_seeds(out / "image");
  flag_seeds(out / "flags");
  fs::remove_all(scratch);
  std::printf("seed corpus written to %s\n", out.c_str());
  return 0;
}
