// File: fuzz/make_corpus.cc
// Writes the fuzzers' seed corpus: small valid inputs of every kind, one
// folder per target (the folder layout of fuzz/corpus), each input prefixed
// with the byte that selects the harness's mode where it has one; and for
// each hardening finding a small input that carries it (named finding<N>_...,
// N the finding of issue 35), so the fuzzers start next to what once got
// through and the replay tests run it under the sanitizers.
//
//   bazel run //fuzz:make_corpus -- <fuzz/corpus folder>   (tools/fuzz_corpus.sh)
#include <unistd.h>

#include <cmath>
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
#include "fuzz/image_builders.h"
#include "fuzz/structured_input.h"
#include "optim/adam.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
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

std::vector<uint8_t> text(const std::string& s) { return {s.begin(), s.end()}; }

// --- data sets -------------------------------------------------------------------

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
  // Dims whose product is 2^64 - 1 (the declared size wrapped), then a (2, 2)
  // header with more data than it declares; both gzipped by the harness.
  std::vector<uint8_t> wrapped = {0, 0, 0x08, 3};
  for (uint32_t dim : {4294967295u, 641u, 6700417u}) data::testing::append_be32(wrapped, dim);
  wrapped.resize(wrapped.size() + 1024, 0);
  write(out / "finding7_wrapped_dims", prefixed(3, wrapped));
  std::vector<uint8_t> longer = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 2};
  longer.resize(longer.size() + 4096, 1);
  write(out / "finding7_more_than_declared", prefixed(3, longer));
}

void cifar_seeds(const fs::path& out, const fs::path& scratch) {
  const data::Dataset set = data::testing::random_dataset(2, 3, 32, 32, 10, 2);
  const fs::path batch = scratch / "b.bin";
  data::write_cifar_batch(batch.string(), set);
  write(out / "two_records", prefixed(0, read(batch)));
  write(out / "two_records_strict_official", prefixed(3, read(batch)));
}

// --- safetensors and checkpoints -----------------------------------------------------------

// A safetensors file with this header text and data section.
std::vector<uint8_t> safetensors_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
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
  write(out / "finding8_byte_order_mark", safetensors_file("\xEF\xBB\xBF{}", 0));
  write(out / "finding8_nul_in_dtype",
        safetensors_file(R"({"t":{"dtype":"F3\u0000\u001b[2J","shape":[1],"data_offsets":[0,4]}})", 4));
}

StateDict with_entry(StateDict state, const std::string& name, const Tensor& value) {
  for (auto& [key, entry] : state) {
    if (key == name) entry = value;
  }
  return state;
}

// An SGD (momentum) and an Adam state after one step over the checkpoint
// fuzzer's parameters, each with a StepLR's entries under "schedule.".
std::pair<StateDict, StateDict> optimizer_states() {
  std::vector<Tensor> params = {zeros({3}, {.requires_grad = true}),
                                zeros({2, 2}, {.requires_grad = true})};
  optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  optim::Adam adam(params, {.lr = 0.1});
  StateDict states[2];
  optim::Optimizer* opts[2] = {&sgd, &adam};
  for (int k = 0; k < 2; ++k) {
    for (Tensor& p : params) p.set_grad(ones(p.sizes()));
    opts[k]->step();
    optim::StepLR schedule(*opts[k], 2);
    schedule.step();
    states[k] = opts[k]->state_dict();
    for (auto& [name, value] : schedule.state_dict()) states[k].emplace_back("schedule." + name, value);
  }
  return {states[0], states[1]};
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
  write(out / "small", prefixed(0, read(file)));
  const auto [sgd, adam] = optimizer_states();
  auto state_seed = [&](const std::string& name, uint8_t mode, const StateDict& state) {
    save_safetensors(file.string(), state);
    write(out / name, prefixed(mode, read(file)));
  };
  state_seed("sgd_state", 1, sgd);
  state_seed("adam_state", 3, adam);
  const TensorOptions f64 = {.dtype = DType::Float64};
  state_seed("finding4_step_1e30", 1, with_entry(sgd, "state.0.step", full({}, 1e30)));
  state_seed("finding4_step_2p63", 1, with_entry(sgd, "state.0.step", full({}, 9223372036854775808.0, f64)));
  state_seed("finding4_step_2.5", 3, with_entry(adam, "state.1.step", full({}, 2.5, f64)));
  state_seed("finding4_step_negative", 1, with_entry(sgd, "state.0.step", full({}, -1, f64)));
  state_seed("finding4_last_step_1e30", 1, with_entry(sgd, "schedule.last_step", full({}, 1e30, f64)));
  state_seed("finding4_lr_inf", 3, with_entry(adam, "param_groups.0.lr", full({}, INFINITY, f64)));
  state_seed("finding4_params_1e30", 1, with_entry(sgd, "param_groups.0.params", tensor({1e30, 1.0}, {2})));
  state_seed("finding4_exp_avg_sq_negative", 3,
             with_entry(adam, "state.0.exp_avg_sq", full({3}, -1.0)));
}

// --- images ----------------------------------------------------------------------

std::vector<uint8_t> gray_palette(int entries) {
  std::vector<uint8_t> palette;
  for (int e = 0; e < entries; ++e) palette.insert(palette.end(), 3, static_cast<uint8_t>(10 * e));
  return palette;
}

// An indexed PNG's chunks: `entries` palette entries, the pixels all `index`.
std::vector<fuzz::PngChunk> indexed_png(uint32_t w, uint32_t h, uint8_t depth, int entries,
                                        uint8_t index, bool interlaced, bool compress) {
  const std::vector<uint8_t> rows =
      fuzz::png_rows(w, h, depth, std::vector<uint8_t>(w * h, index), interlaced);
  return {{"IHDR", fuzz::png_header(w, h, depth, 3, interlaced)},
          {"PLTE", gray_palette(entries)},
          {"IDAT", compress ? fuzz::zlib_compressed(rows) : rows},
          {"IEND", {}}};
}

fuzz::BmpSpec palette_bmp(uint32_t header_size, uint16_t bits, int entries, uint8_t index) {
  return {.header_size = header_size,
          .width = 5,
          .height = 2,
          .bits = bits,
          .palette_rgb = gray_palette(entries),
          .pixels = fuzz::bmp_rows(5, 2, bits, std::vector<uint8_t>(10, index))};
}

void png_seeds(const fs::path& out) {
  for (uint8_t depth : {1, 2, 4, 8}) {
    for (bool interlaced : {false, true}) {
      const std::string name = "indexed_" + std::to_string(depth) + (interlaced ? "_adam7" : "");
      write(out / name, fuzz::png_input(indexed_png(6, 5, depth, 1 << std::min<int>(depth, 3), 1, interlaced, false), true, 3));
    }
  }
  std::vector<fuzz::PngChunk> chunks = indexed_png(4, 4, 8, 4, 3, false, false);
  chunks.insert(chunks.begin() + 2, {{"tRNS", {255, 0}}, {"tEXt", {'k', 0, 'v'}}});
  write(out / "indexed_trns_text", fuzz::png_input(chunks, true, 1));
  // Apple's CgBI PNGs carry deflate data without the zlib header. (stb 2.27
  // fails on a deflate stream that ends exactly at the end of its data: its
  // bit reader wants 16 bits at hand; the zlib checksum after it provides them.)
  chunks = indexed_png(4, 4, 8, 4, 3, false, true);
  chunks[2].data.erase(chunks[2].data.begin(), chunks[2].data.begin() + 2);
  chunks.insert(chunks.begin(), {"CgBI", {0, 0, 0, 0}});
  write(out / "indexed_cgbi", fuzz::png_input(chunks, false, 3));
  const std::vector<uint8_t> gray_rows = fuzz::png_rows(4, 3, 8, std::vector<uint8_t>(12, 77), false);
  write(out / "gray", fuzz::png_input({{"IHDR", fuzz::png_header(4, 3, 8, 0, 0)}, {"IDAT", gray_rows}}, true, 1));
  write(out / "finding2_index_past_palette", fuzz::png_input(indexed_png(3, 2, 8, 1, 200, false, false), true, 3));
  chunks = indexed_png(4, 4, 4, 4, 3, false, false);
  chunks.insert(chunks.begin() + 2, {"PLTE", gray_palette(2)});
  write(out / "finding2_second_palette", fuzz::png_input(chunks, true, 1));
}

void bmp_seeds(const fs::path& out) {
  for (uint32_t header : {12u, 40u}) {
    for (uint16_t bits : {1, 4, 8}) {
      // OS/2 palettes are read 4 entries short: 8 entries, index 3.
      const int entries = header == 12 ? 8 : 1 << std::min<int>(bits, 2);
      write(out / ("palette_" + std::to_string(header) + "_" + std::to_string(bits)),
            fuzz::bmp_input(palette_bmp(header, bits, entries, 1), 3));
    }
  }
  write(out / "rgb_124", fuzz::bmp_input({.header_size = 124, .width = 3, .height = -2, .bits = 32,
                                          .pixels = std::vector<uint8_t>(24, 90)}, 3));
  write(out / "bitfields_16", fuzz::bmp_input({.header_size = 40, .width = 2, .height = 2, .bits = 16,
                                               .compression = 3, .masks = {0xF800, 0x07E0, 0x001F},
                                               .pixels = std::vector<uint8_t>(8, 0x5A)}, 1));
  write(out / "finding1_zero_width", fuzz::bmp_input({.width = 0, .height = 16}, 3));
  write(out / "finding1_zero_height_os2", fuzz::bmp_input({.header_size = 12, .width = 16, .height = 0}, 3));
  write(out / "finding2_index_past_palette", fuzz::bmp_input(palette_bmp(40, 8, 2, 200), 3));
  write(out / "finding2_os2_palette_short", fuzz::bmp_input(palette_bmp(12, 8, 8, 6), 1));
  fuzz::BmpSpec inside = palette_bmp(40, 8, 2, 1);
  inside.offset_shift = -12;
  write(out / "finding2_offset_inside_header", fuzz::bmp_input(inside, 1));
  write(out / "finding3_os2_truncated", fuzz::bmp_input({.header_size = 12, .width = 5, .height = 3, .bits = 24,
                                                         .pixels = std::vector<uint8_t>(40, 7)}, 3));
}

void jpeg_seeds(const fs::path& out) {
  Generator gen(6);
  const std::vector<uint8_t> rgb = data::testing::encode_jpeg(randint(0, 256, {3, 9, 7}, {.dtype = DType::UInt8}, &gen), 75);
  const std::vector<uint8_t> gray = data::testing::encode_jpeg(randint(0, 256, {1, 8, 8}, {.dtype = DType::UInt8}, &gen), 50);
  const std::vector<fuzz::JpegSegment> segments = fuzz::jpeg_segments(rgb);
  write(out / "rgb", fuzz::jpeg_input(segments, true, 3));
  write(out / "gray", fuzz::jpeg_input(fuzz::jpeg_segments(gray), true, 1));
  write(out / "finding8_no_end_marker", fuzz::jpeg_input(segments, false, 3));
  std::vector<fuzz::JpegSegment> unknown = segments;
  for (fuzz::JpegSegment& segment : unknown) {
    if (segment.code == 0xDA) segment.payload[1] = 9;  // the scan's first component id
  }
  write(out / "finding8_unknown_component", fuzz::jpeg_input(unknown, true, 3));
}

// The raw image fuzzer: the structured seeds' files, byte 0 the channels.
void image_seeds(const fs::path& out) {
  Generator gen(5);
  const Tensor rgb = randint(0, 256, {3, 6, 5}, {.dtype = DType::UInt8}, &gen);
  const Tensor gray = randint(0, 256, {1, 4, 4}, {.dtype = DType::UInt8}, &gen);
  write(out / "rgb.png", prefixed(1, data::testing::encode_png(rgb)));
  write(out / "gray.png", prefixed(0, data::testing::encode_png(gray)));
  write(out / "rgb.bmp", prefixed(1, data::testing::encode_bmp(rgb)));
  write(out / "rgb_os2.bmp", prefixed(1, data::testing::encode_bmp(rgb, 12)));
  write(out / "rgb.jpg", prefixed(1, data::testing::encode_jpeg(rgb, 80)));
  write(out / "gray.jpg", prefixed(0, data::testing::encode_jpeg(gray, 60)));
  write(out / "indexed.png", prefixed(1, fuzz::png_file(indexed_png(5, 4, 4, 16, 9, true, true))));
  write(out / "palette.bmp", prefixed(0, fuzz::bmp_file(palette_bmp(40, 4, 16, 9))));
  write(out / "finding1_zero_height.bmp", prefixed(1, fuzz::bmp_file({.width = 16, .height = 0})));
  write(out / "finding2_index_past_palette.png", prefixed(1, fuzz::png_file(indexed_png(3, 2, 8, 1, 200, false, true))));
  write(out / "finding2_index_past_palette.bmp", prefixed(1, fuzz::bmp_file(palette_bmp(40, 8, 2, 200))));
  std::vector<uint8_t> os2 = data::testing::encode_bmp(rgb, 12);
  os2.resize(os2.size() - 9);
  write(out / "finding3_os2_truncated.bmp", prefixed(1, os2));
  std::vector<uint8_t> jpeg = data::testing::encode_jpeg(rgb, 80);
  jpeg.resize(jpeg.size() / 2);
  write(out / "finding8_truncated.jpg", prefixed(1, jpeg));
}

void flag_seeds(const fs::path& out) {
  const std::vector<std::string> lines = {
      "--epochs\n3\n--lr\n1e-3\n--seed\n42",
      "--device\ncpu\n--synthetic\n1000\n--metrics\nm.jsonl\n--allow-nonfinite-loss",
      "--batch-size\n64\n--label-smoothing\n0.1\n--target-accuracy\n0.9\n--limit\n500",
      "--schedule\nonecycle\n--optimizer\nsgd\n--weight-decay\n5e-4\n--save\nck.ckpt",
      "--help",
  };
  for (size_t i = 0; i < lines.size(); ++i) write(out / ("args_" + std::to_string(i)), text(lines[i]));
  write(out / "finding9_save_is_metrics", text("--save\nm.csv\n--metrics\nm.csv"));
  write(out / "finding9_resume_is_plot", text("--resume\nc.png\n--plot\nc.png"));
  write(out / "finding9_empty_save", text("--save\n"));
  write(out / "finding9_empty_resume", text("--resume="));
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
  png_seeds(out / "png");
  bmp_seeds(out / "bmp");
  jpeg_seeds(out / "jpeg");
  flag_seeds(out / "flags");
  fs::remove_all(scratch);
  std::printf("seed corpus written to %s\n", out.c_str());
  return 0;
}
