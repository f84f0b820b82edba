// File: tests/core/cuda/random_gpu_test.cc
// GPU random fills against the CPU draws of the same (seed, offset): dropout's
// mask (dropout_apply of ones) bit for bit against the CPU op's, dropout_apply
// of any input against that mask, rand, uniform_ and randint bit for bit in
// every dtype, and randn to a few float64 ulp (the device's log and cos are not
// glibc's; see core/cuda/random.h), directly, through the factories on a GPU
// and inside a capture. Outputs start as NaN,
// so unwritten elements show, and some are channels-last, since element i is
// the i-th in row-major order.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/random.h"
#include "core/generator.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr DType kDtypes[] = {DType::Float32, DType::Float64};

const Shape kShapes[] = {{1}, {7}, {1000003}, {2, 3, 5, 7}, {0}, {}};

MemoryFormat format_for(const Shape& sizes) {
  return sizes.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

Tensor poisoned_gpu(const Shape& sizes, DType dtype) {
  return full(sizes, kNaN,
              {.dtype = dtype, .device = testing::test_gpu(), .memory_format = format_for(sizes)});
}

// The CPU dropout op's mask: dropout of ones is the mask itself (1 * m == m).
Tensor cpu_dropout_mask(const Shape& sizes, DType dtype, double p, Generator& gen) {
  return dropout(ones(sizes, {.dtype = dtype}), p, /*training=*/true, &gen);
}

// The same on the GPU, from dropout_apply's draws at `philox`.
Tensor gpu_dropout_mask(const Shape& sizes, DType dtype, double p, const cuda::PhiloxArgs& philox) {
  Tensor mask = poisoned_gpu(sizes, dtype);
  const Tensor one = ones(sizes, {.dtype = dtype, .device = testing::test_gpu(), .memory_format = format_for(sizes)});
  cuda::dropout_apply(mask.strided(), one.strided(), p, philox);
  return mask;
}

Tensor gpu_dropout_mask(const Shape& sizes, DType dtype, double p, Generator& gen) {
  return gpu_dropout_mask(sizes, dtype, p, cuda::philox_draw(gen, static_cast<uint64_t>((numel_of(sizes) + 3) / 4)));
}

}  // namespace

LOOM_GPU_TEST_CASE("the GPU dropout mask is the CPU dropout op's mask, bit for bit") {
  for (DType dtype : kDtypes) {
    for (double p : {0.1, 0.5, 0.9}) {
      for (const Shape& sizes : kShapes) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(p);
        CAPTURE(shape_str(sizes));
        Generator cpu_gen(300), gpu_gen(300);
        // A first draw of another size moves both offsets off zero (and off a
        // multiple of anything), so first_block is exercised too.
        cpu_dropout_mask({5}, dtype, p, cpu_gen);
        gpu_dropout_mask({5}, dtype, p, gpu_gen);
        Tensor expected = cpu_dropout_mask(sizes, dtype, p, cpu_gen);
        Tensor mask = gpu_dropout_mask(sizes, dtype, p, gpu_gen);
        CHECK_CLOSE(mask.cpu(), expected, 0, 0);
        CHECK(gpu_gen.offset() == cpu_gen.offset());
      }
    }
  }
}

LOOM_GPU_TEST_CASE("dropout mask of seed 0 from the Random123 known answer, by hand") {
  // philox(0, 0) = 6627e8d5 e169c58d bc57ac4c 9b00dbd8: uniform_float gives 0.399,
  // 0.881, 0.736, 0.605, so p = 0.7 drops lanes 0 and 3 and scales the rest by
  // 1 / (1 - p).
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    Tensor mask = gpu_dropout_mask({4}, dtype, 0.7, {.seed = 0, .first_block = 0});
    const double scale = 1.0 / (1.0 - 0.7);  // not 1 / 0.3: 1 - 0.7 rounds above 0.3
    const double kept = dtype == DType::Float32 ? static_cast<float>(scale) : scale;
    CHECK(testing::values(mask) == std::vector<double>{0, kept, kept, 0});
  }
}

LOOM_GPU_TEST_CASE("p = 1 drops everything; p = 0 keeps everything at scale 1") {
  CHECK(testing::values(gpu_dropout_mask({1001}, DType::Float32, 1.0, {.seed = 5, .first_block = 0})) ==
        std::vector<double>(1001, 0.0));
  CHECK(testing::values(gpu_dropout_mask({1001}, DType::Float32, 0.0, {.seed = 5, .first_block = 0})) ==
        std::vector<double>(1001, 1.0));
}

LOOM_GPU_TEST_CASE("dropout_apply is its input times the mask of the same draws, in any floating dtype and layout") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    for (const Shape& sizes : kShapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      const cuda::PhiloxArgs draws{.seed = 11, .first_block = 3};
      const Tensor x = randn(sizes, {.dtype = DType::Float64}).to(testing::test_gpu());
      const Tensor mask = gpu_dropout_mask(sizes, DType::Float64, 0.3, draws);
      // The product in float32 for the 16-bit dtypes, rounded once.
      const DType compute = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
      const Tensor in = x.to(dtype).contiguous(format_for(sizes));
      const Tensor expected = mul(in.to(compute), mask.to(compute)).to(dtype);
      Tensor out = poisoned_gpu(sizes, dtype);
      cuda::dropout_apply(out.strided(), in.strided(), 0.3, draws);
      CHECK_CLOSE(out.to(DType::Float64).cpu(), expected.to(DType::Float64).cpu(), 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("a uniform fill draws what rand draws, bit for bit, in every floating dtype") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    for (const Shape& sizes : kShapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      Generator cpu_gen(301), gpu_gen(301);
      rand({3}, {.dtype = dtype}, &cpu_gen);
      gpu_gen.reserve(3);
      Tensor expected = rand(sizes, {.dtype = dtype}, &cpu_gen);
      Tensor out = poisoned_gpu(sizes, dtype);
      // rand's bits: its dtype's significand (8 for bfloat16, 11 for float16), exact in float32
      const int bits = dtype == DType::Float64    ? 53
                       : dtype == DType::BFloat16 ? 8
                       : dtype == DType::Float16  ? 11
                                                  : 24;
      cuda::fill_random(out.strided(), {.bits = bits}, cuda::philox_draw(gpu_gen, numel_of(sizes)));
      CHECK_CLOSE(out.to(DType::Float64).cpu(), expected.to(DType::Float64), 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("a fill refuses the dtypes and draws it does not make, by name") {
  Tensor out = poisoned_gpu({4}, DType::Float32);
  const cuda::PhiloxArgs draws{.seed = 1};
  const Tensor labels = zeros({4}, {.dtype = DType::Int64, .device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(cuda::fill_random(labels.strided(), {}, draws), TypeError,
                             "[random fill] fills a floating dtype, got int64");
  CHECK_THROWS_WITH_FRAGMENT(cuda::fill_random(out.strided(), {.bits = 30}, draws), ValueError,
                             "keeps 1 to 24 bits, or 53, got 30");
  CHECK_THROWS_WITH_FRAGMENT(
      cuda::fill_random(out.strided(), {.kind = cuda::RandomDraw::Kind::Integer, .range = 0}, draws), ValueError,
      "needs a range of at least 1");
}

LOOM_GPU_TEST_CASE("a normal fill draws what randn draws, to a few float64 ulp") {
  // float64: rtol 1e-14 (CUDA's log is within 1 ulp, cos within 2, glibc's are
  // correctly rounded). float32: the double result rounds to the same float
  // except where it sits on a rounding boundary, so 1 float ulp (rtol 2.5e-7).
  for (DType dtype : kDtypes) {
    for (const Shape& sizes : kShapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      Generator cpu_gen(302), gpu_gen(302);
      Tensor expected = randn(sizes, {.dtype = dtype}, &cpu_gen);
      Tensor out = poisoned_gpu(sizes, dtype);
      cuda::fill_random(out.strided(), {.kind = cuda::RandomDraw::Kind::Normal},
                        cuda::philox_draw(gpu_gen, numel_of(sizes)));
      if (dtype == DType::Float64) {
        CHECK_CLOSE(out.cpu(), expected, 1e-14, 1e-15);
      } else {
        CHECK_CLOSE(out.cpu(), expected, 2.5e-7, 1e-12);
      }
    }
  }
}

// The same draws captured: each replay stores the generator's state where the
// graph's kernels read it and advances the generator, so replay k draws what
// the k-th eager call from the same state draws; capturing draws nothing.
LOOM_GPU_TEST_CASE("a captured dropout draws fresh masks each replay, the eager calls' bits") {
  Generator captured(7), eager(7);
  const Tensor x = ones({1001}, {.device = testing::test_gpu()});
  (void)dropout(x, 0.5, true, &captured);  // an offset off zero
  (void)dropout(x, 0.5, true, &eager);
  Tensor out = empty({1001}, {.device = testing::test_gpu()});
  cuda::CudaGraph graph;
  graph.capture([&] {
    const Tensor first = dropout(x, 0.5, true, &captured);  // drawn first, as below
    out.copy_(first + dropout(x, 0.25, true, &captured));
  });
  CHECK(captured.offset() == eager.offset());
  std::vector<double> previous;
  for (int replay = 0; replay < 3; ++replay) {
    CAPTURE(replay);
    graph.replay();
    const Tensor first = dropout(x, 0.5, true, &eager);
    const Tensor expected = first + dropout(x, 0.25, true, &eager);
    CHECK_CLOSE(out.cpu(), expected.cpu(), 0, 0);
    CHECK(captured.offset() == eager.offset());
    CHECK(testing::values(out) != previous);
    previous = testing::values(out);
  }
}

LOOM_GPU_TEST_CASE("rand and randn on a GPU draw there: the CPU's values, the generator advanced alike") {
  for (DType dtype : kDtypes) {
    for (const Shape& sizes : kShapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      const TensorOptions on_gpu{.dtype = dtype, .device = testing::test_gpu(), .memory_format = format_for(sizes)};
      Generator cpu_gen(304), gpu_gen(304);
      CHECK_CLOSE(rand(sizes, on_gpu, &gpu_gen).cpu(), rand(sizes, {.dtype = dtype}, &cpu_gen), 0, 0);
      const Tensor normal = randn(sizes, on_gpu, &gpu_gen);
      CHECK(normal.is_contiguous(format_for(sizes)));
      const double rtol = dtype == DType::Float64 ? 1e-14 : 2.5e-7;
      CHECK_CLOSE(normal.cpu(), randn(sizes, {.dtype = dtype}, &cpu_gen), rtol, 1e-12);
      CHECK(gpu_gen.offset() == cpu_gen.offset());
    }
  }
}

// Bit for bit in every dtype: the 16-bit rand keeps 8 or 11 bits, uniform_
// scales and shifts them in the dtype's arithmetic, randint goes through a
// double; ranges past 2^53 and negative lows included.
LOOM_GPU_TEST_CASE("rand, uniform_ and randint draw the CPU's bits on a GPU in every dtype") {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    for (const Shape& sizes : kShapes) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      const TensorOptions on_gpu{.dtype = dtype, .device = testing::test_gpu(), .memory_format = format_for(sizes)};
      Generator cpu_gen(306), gpu_gen(306);
      const Tensor got = rand(sizes, on_gpu, &gpu_gen);
      CHECK(got.dtype() == dtype);
      CHECK(got.is_contiguous(format_for(sizes)));
      CHECK_CLOSE(got.cpu().to(DType::Float64), rand(sizes, {.dtype = dtype}, &cpu_gen).to(DType::Float64), 0, 0);
      Tensor filled = full(sizes, kNaN, on_gpu);
      filled.uniform_(-0.3, 1.7, &gpu_gen);
      const Tensor expected = empty(sizes, {.dtype = dtype}).uniform_(-0.3, 1.7, &cpu_gen);
      CHECK_CLOSE(filled.cpu().to(DType::Float64), expected.to(DType::Float64), 0, 0);
      CHECK(gpu_gen.offset() == cpu_gen.offset());
    }
  }
  struct Range {
    int64_t low, high;
  };
  for (DType dtype : {DType::Int64, DType::Int32, DType::UInt8, DType::Float32, DType::Float64, DType::Bool}) {
    for (Range r : {Range{0, 2}, Range{-7, 200}, Range{-(int64_t{1} << 60), int64_t{1} << 61}}) {
      const bool narrow = dtype == DType::UInt8 || dtype == DType::Bool || dtype == DType::Int32;
      if (narrow && r.high > 200) continue;
      if ((dtype == DType::UInt8 || dtype == DType::Bool) && r.low < 0) continue;
      CAPTURE(dtype_name(dtype));
      CAPTURE(r.low);
      Generator cpu_gen(307), gpu_gen(307);
      const Tensor got = randint(r.low, r.high, {3, 1001}, {.dtype = dtype, .device = testing::test_gpu()}, &gpu_gen);
      CHECK(got.dtype() == dtype);
      const Tensor expected = randint(r.low, r.high, {3, 1001}, {.dtype = dtype}, &cpu_gen);
      CHECK(testing::values(got) == testing::values(expected));
      CHECK(gpu_gen.offset() == cpu_gen.offset());
    }
  }
}

// As dropout's: a captured rand or randn draws fresh numbers at each replay,
// the bits of the eager calls from the same generator state.
LOOM_GPU_TEST_CASE("randn in 16 bits on a GPU is its float32 draw rounded, as on the CPU") {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(half));
    Generator cpu_gen(305), gpu_gen(305);
    const Tensor got = randn({1000}, {.dtype = half, .device = testing::test_gpu()}, &gpu_gen);
    CHECK(got.dtype() == half);
    // The CPU draws in double and rounds through float32 to 16 bits; the GPU's
    // double may differ in its last bits, which can move a value across one
    // 16-bit rounding boundary: compare to one 16-bit ulp.
    const Tensor expected = randn({1000}, {.dtype = DType::Float64}, &cpu_gen);
    CHECK_CLOSE(got.cpu().to(DType::Float64), expected, half == DType::BFloat16 ? 8e-3 : 1e-3, 1e-6);
    CHECK(gpu_gen.offset() == cpu_gen.offset());
  }
}

LOOM_GPU_TEST_CASE("rand and randn inside a capture draw fresh numbers each replay, the eager calls' bits") {
  const TensorOptions on_gpu{.device = testing::test_gpu(), .memory_format = MemoryFormat::ChannelsLast};
  const Shape sizes = {2, 3, 5, 7};
  Generator captured(8), eager(8);
  const TensorOptions bf16_gpu{.dtype = DType::BFloat16, .device = testing::test_gpu()};
  Tensor out = empty(sizes, on_gpu), out16 = empty({9}, bf16_gpu);
  cuda::CudaGraph graph;
  graph.capture([&] {
    const Tensor uniform = rand(sizes, on_gpu, &captured);  // drawn first, as below
    out.copy_(uniform + randn(sizes, on_gpu, &captured));
    out16.copy_(randn({9}, bf16_gpu, &captured));
  });
  CHECK(captured.offset() == eager.offset());
  std::vector<double> previous;
  for (int replay = 0; replay < 3; ++replay) {
    CAPTURE(replay);
    graph.replay();
    const Tensor uniform = rand(sizes, on_gpu, &eager);
    CHECK_CLOSE(out.cpu(), (uniform + randn(sizes, on_gpu, &eager)).cpu(), 0, 0);
    CHECK_CLOSE(out16.cpu().to(DType::Float64), randn({9}, bf16_gpu, &eager).cpu().to(DType::Float64), 0, 0);
    CHECK(captured.offset() == eager.offset());
    CHECK(testing::values(out) != previous);
    previous = testing::values(out);
  }
}

LOOM_GPU_TEST_CASE("randint, 16-bit rand and uniform_ inside a capture draw fresh numbers each replay") {
  Generator captured(9), eager(9);
  const TensorOptions int64_gpu{.dtype = DType::Int64, .device = testing::test_gpu()};
  const TensorOptions bf16_gpu{.dtype = DType::BFloat16, .device = testing::test_gpu()};
  Tensor labels = empty({64}, int64_gpu), noise = empty({33}, bf16_gpu), init = empty({17}, bf16_gpu);
  cuda::CudaGraph graph;
  graph.capture([&] {
    labels.copy_(randint(-3, 1000, {64}, int64_gpu, &captured));
    noise.copy_(rand({33}, bf16_gpu, &captured));
    init.uniform_(-2.0, 2.0, &captured);
  });
  CHECK(captured.offset() == eager.offset());
  std::vector<double> previous;
  for (int replay = 0; replay < 3; ++replay) {
    CAPTURE(replay);
    graph.replay();
    CHECK(testing::values(labels) == testing::values(randint(-3, 1000, {64}, int64_gpu, &eager)));
    CHECK(testing::values(noise) == testing::values(rand({33}, bf16_gpu, &eager)));
    Tensor expected = empty({17}, bf16_gpu);
    expected.uniform_(-2.0, 2.0, &eager);
    CHECK(testing::values(init) == testing::values(expected));
    CHECK(captured.offset() == eager.offset());
    CHECK(testing::values(labels) != previous);
    previous = testing::values(labels);
  }
}

#endif  // LOOM_WITH_CUDA
