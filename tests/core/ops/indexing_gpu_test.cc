// File: tests/core/ops/indexing_gpu_test.cc
// The ops added for the libtorch-style API, on the GPU against the CPU
// reference, forward and backward, with inputs in NCHW and channels-last:
// comparisons (Bool masks, equal bit for bit), where, masked_fill, gather,
// index_select, embedding (the atomic scatter-add backward, with repeated
// indices) and conv_transpose2d (the conv kernels with swapped roles, under
// strict fp32 and tf32); scatter, scatter_add (float and integer atomics),
// index_add, bincount, masked_select and nonzero on random configurations (and
// the scatter-adds under a deterministic policy, equal to the CPU bit for bit),
// their replay in a CUDA graph and the refusals inside a capture. Each check
// prints one "PARITY" line.
//
// N batch, C channels, H, W, K out channels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/capture.h"
#include "core/cuda/graph.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr MemoryFormat kLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};

Tensor to_gpu(const Tensor& t, MemoryFormat format) {
  Tensor g = t.detach().to(testing::test_gpu());
  if (t.dim() == 4) g = g.contiguous(format);
  return t.requires_grad() ? g.requires_grad_(true) : g;
}

// Runs `op` on CPU and GPU copies of `inputs` (4-D ones in `format` on the
// GPU), backpropagates one random gradient through both when the output
// requires grad, and checks the output and every input gradient.
void check_parity(const std::string& name, const OpFn& op, const std::vector<Tensor>& inputs,
                  MemoryFormat format, double tol, Generator& gen) {
  CAPTURE(name);
  CAPTURE(memory_format_name(format));
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.detach().clone();
    cpu_in.push_back(t.requires_grad() ? leaf.requires_grad_(true) : leaf);
    gpu_in.push_back(to_gpu(cpu_in.back(), format));
  }
  Tensor cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  REQUIRE(gpu_out.device().is_cuda());
  CHECK(gpu_out.dtype() == cpu_out.dtype());
  const double fwd = testing::normalized_error(gpu_out.cpu(), cpu_out);
  double bwd = 0;
  if (cpu_out.requires_grad()) {
    Tensor g = randn(cpu_out.sizes(), {.dtype = cpu_out.dtype()}, &gen);
    cpu_out.backward(g);
    gpu_out.backward(g.to(testing::test_gpu()));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      // An input that reaches the output only through a comparison gets no
      // gradient on either device.
      REQUIRE(gpu_in[i].grad().defined() == cpu_in[i].grad().defined());
      if (!cpu_in[i].grad().defined()) continue;
      CHECK(gpu_in[i].grad().device().is_cuda());
      bwd = std::max(bwd, testing::normalized_error(gpu_in[i].grad().cpu(), cpu_in[i].grad()));
    }
  }
  std::printf("PARITY %-26s %-13s fwd=%.2e bwd=%.2e\n", name.c_str(),
              std::string(memory_format_name(format)).c_str(), fwd, bwd);
  CHECK(fwd <= tol);
  CHECK(bwd <= tol);
}

Tensor leaf(const Shape& sizes, Generator& gen) {
  return randn(sizes, {}, &gen).requires_grad_(true);
}

Tensor ints(int64_t high, const Shape& sizes, Generator& gen) {
  return randint(0, high, sizes, {.dtype = DType::Int64}, &gen);
}

// An index of `sizes` whose values along `dim` are distinct in every line:
// scatter's writes never collide, so the GPU's result is defined.
Tensor unique_ints(int64_t high, const Shape& sizes, int64_t dim, Generator& gen) {
  Shape wide = sizes;
  wide[dim] = high;
  return argsort(randn(wide, {}, &gen), dim).narrow(dim, 0, sizes[dim]).contiguous();
}

// Random scatter operands' sizes: a 4-D x, a dim, an index up to `repeats` times x's extent
// along dim (so indices repeat) and no larger elsewhere, and a src as large or one larger in each dim.
struct ScatterShapes {
  Shape x, index, src;
  int64_t dim = 0;
};

class ShapeDraw {
 public:
  explicit ShapeDraw(uint64_t seed) : rng_(seed) {}

  int64_t between(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

  ScatterShapes scatter(int64_t repeats) {
    ScatterShapes s;
    s.x = {between(1, 4), between(2, 9), between(1, 5), between(1, 6)};
    s.dim = between(0, 3);
    s.index = Shape(4);
    s.src = Shape(4);
    for (int64_t d = 0; d < 4; ++d) {
      s.index[d] = d == s.dim ? between(1, repeats * s.x[d]) : between(1, s.x[d]);
      s.src[d] = s.index[d] + between(0, 1);
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

LOOM_GPU_TEST_CASE("comparisons, where and masked_fill match the CPU on the GPU") {
  Generator gen(61);
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({2, 3, 4, 5}, gen), b = leaf({2, 3, 4, 5}, gen), row = leaf({5}, gen);
    Tensor labels = ints(3, {2, 3, 4, 5}, gen), other = ints(3, {2, 3, 4, 5}, gen);
    for (auto [name, fn] : std::vector<std::pair<std::string, OpFn>>{
             {"eq", [](auto& in) { return in[0] == in[1]; }},
             {"ne", [](auto& in) { return in[0] != in[1]; }},
             {"lt(broadcast)", [](auto& in) { return in[0] < in[2]; }},
             {"le", [](auto& in) { return in[0] <= in[1]; }},
             {"gt(scalar)", [](auto& in) { return in[0] > 0.25; }},
             {"ge(scalar)", [](auto& in) { return in[0] >= -0.5; }},
             {"eq(int64)", [](auto& in) { return in[3] == in[4]; }},
             {"sum(mask)", [](auto& in) { return (in[3] == in[4]).sum(); }},
         }) {
      check_parity(name, fn, {a, b, row, labels, other}, f, 0.0, gen);
    }
    check_parity("where", [](auto& in) { return where(in[0] > in[1], in[0], in[2]); },
                 {a, b, row}, f, 1e-6, gen);
    check_parity("masked_fill", [](auto& in) { return masked_fill(in[0], in[1] > 0, -3.0); },
                 {a, b}, f, 1e-6, gen);
  }
}

LOOM_GPU_TEST_CASE("gather, index_select and embedding match the CPU on the GPU") {
  Generator gen(62);
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({3, 5, 4, 6}, gen);
    Tensor index = ints(5, {3, 7, 4, 6}, gen), rows = ints(6, {9}, gen);
    check_parity("gather(dim 1)", [](auto& in) { return gather(in[0], 1, in[1]); }, {x, index},
                 f, 1e-6, gen);
    check_parity("index_select(dim 3)", [](auto& in) { return index_select(in[0], 3, in[1]); },
                 {x, rows}, f, 1e-6, gen);
    // A small table read many times: every row is hit by many atomic adds.
    Tensor table = leaf({7, 33}, gen), tokens = ints(7, {16, 40}, gen);
    check_parity("embedding", [](auto& in) { return embedding(in[0], in[1]); }, {table, tokens},
                 f, 1e-5, gen);
  }
}

LOOM_GPU_TEST_CASE("gather and index_select check indices on the GPU too") {
  Tensor x = zeros({2, 3}, {.device = testing::test_gpu()});
  Tensor bad = tensor({0, 3}, {2}, {.dtype = DType::Int64, .device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 1, bad), IndexError, "index 3 (element 1");
}

LOOM_GPU_TEST_CASE("conv_transpose2d matches the CPU on the GPU") {
  struct Case {
    Shape x, w;
    ConvTranspose2dOptions options;
  };
  const std::vector<Case> cases = {
      {{4, 8, 7, 7}, {8, 16, 3, 3}, {}},
      {{2, 16, 8, 8}, {16, 8, 2, 2}, {.stride = {2, 2}}},
      {{3, 5, 6, 9}, {5, 3, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}},
      {{2, 6, 5, 5}, {6, 2, 3, 3}, {.padding = {1, 1}, .dilation = {2, 2}, .groups = 3}},
  };
  Generator gen(63);
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32}) {
    NumericsGuard policy({.precision = precision});
    const double tol = precision == Precision::StrictFp32 ? 1e-4 : 1e-2;
    for (MemoryFormat f : kLayouts) {
      for (const Case& c : cases) {
        Tensor x = leaf(c.x, gen), w = leaf(c.w, gen), b = leaf({c.w[1] * c.options.groups}, gen);
        const ConvTranspose2dOptions o = c.options;
        check_parity(std::string("conv_transpose2d ") + std::string(precision_name(precision)),
                     [o](auto& in) { return conv_transpose2d(in[0], in[1], in[2], o); },
                     {x, w, b}, f, tol, gen);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("scatter, scatter_add and index_add match the CPU on the GPU") {
  Generator gen(64);
  ShapeDraw draw(64);
  for (int trial = 0; trial < 12; ++trial) {
    const ScatterShapes shapes = draw.scatter(3);
    const Shape &x_sizes = shapes.x, &index_sizes = shapes.index, &src_sizes = shapes.src;
    const int64_t dim = shapes.dim;
    Shape unique_sizes = index_sizes;
    unique_sizes[dim] = std::min(index_sizes[dim], x_sizes[dim]);
    const Tensor x = leaf(x_sizes, gen), src = leaf(src_sizes, gen);
    const Tensor repeated = ints(x_sizes[dim], index_sizes, gen);
    const Tensor distinct = unique_ints(x_sizes[dim], unique_sizes, dim, gen);
    Shape source_sizes = x_sizes;
    source_sizes[dim] = draw.between(1, 12);
    const Tensor source = leaf(source_sizes, gen), ids = ints(x_sizes[dim], {source_sizes[dim]}, gen);
    for (MemoryFormat f : kLayouts) {
      check_parity("scatter_add", [dim](auto& in) { return scatter_add(in[0], dim, in[2], in[1]); },
                   {x, src, repeated}, f, 1e-5, gen);
      check_parity("scatter", [dim](auto& in) { return scatter(in[0], dim, in[2], in[1]); }, {x, src, distinct}, f,
                   0.0, gen);
      check_parity("scatter(value)", [dim](auto& in) { return scatter(in[0], dim, in[1], -1.5); }, {x, repeated},
                   f, 0.0, gen);
      check_parity("index_add", [dim](auto& in) { return index_add(in[0], dim, in[2], in[1], 0.75); },
                   {x, source, ids}, f, 1e-5, gen);
      // Integer atomics: int32 and int64 sums are exact, so equal bit for bit.
      for (DType dtype : {DType::Int32, DType::Int64}) {
        const Tensor xi = ints(50, x_sizes, gen).to(dtype), si = ints(50, src_sizes, gen).to(dtype);
        check_parity(std::string("scatter_add(") + std::string(dtype_name(dtype)) + ")",
                     [dim](auto& in) { return scatter_add(in[0], dim, in[2], in[1]); }, {xi, si, repeated}, f, 0.0,
                     gen);
      }
    }
  }
}

// Under a deterministic policy the floating scatter-adds (scatter_add, index_add,
// and the backward of gather, index_select and embedding) sort each line by
// target and add every target's values in the CPU's order: the CPU's bits,
// with random values and many repeated indices.
LOOM_GPU_TEST_CASE("under a deterministic policy the scatter-adds give the CPU's bits on the GPU") {
  NumericsGuard numerics({.precision = Precision::StrictFp32, .deterministic = true});
  Generator gen(65);
  ShapeDraw draw(65);
  for (int trial = 0; trial < 12; ++trial) {
    const ScatterShapes shapes = draw.scatter(4);
    const Shape &x_sizes = shapes.x, &index_sizes = shapes.index, &src_sizes = shapes.src;
    const int64_t dim = shapes.dim;
    const Tensor x = leaf(x_sizes, gen), src = leaf(src_sizes, gen);
    const Tensor repeated = ints(x_sizes[dim], index_sizes, gen);
    Shape source_sizes = x_sizes;
    source_sizes[dim] = draw.between(1, 16);
    const Tensor source = leaf(source_sizes, gen), ids = ints(x_sizes[dim], {source_sizes[dim]}, gen);
    Shape gathered = x_sizes;
    gathered[dim] = draw.between(1, 3 * x_sizes[dim]);
    const Tensor picks = ints(x_sizes[dim], gathered, gen);
    for (MemoryFormat f : kLayouts) {
      check_parity("scatter_add(deterministic)", [dim](auto& in) { return scatter_add(in[0], dim, in[2], in[1]); },
                   {x, src, repeated}, f, 0.0, gen);
      check_parity("index_add(deterministic)", [dim](auto& in) { return index_add(in[0], dim, in[2], in[1], 0.75); },
                   {x, source, ids}, f, 0.0, gen);
      check_parity("gather(deterministic)", [dim](auto& in) { return gather(in[0], dim, in[1]); }, {x, picks}, f,
                   0.0, gen);
      check_parity("index_select(deterministic)", [dim](auto& in) { return index_select(in[0], dim, in[1]); },
                   {x, ids}, f, 0.0, gen);
    }
  }
  // embedding's backward in every floating dtype: a small table, each row read many times. The CPU
  // has no 16-bit scatter-add: there two GPU runs must agree bit for bit, and the CPU's float32
  // gradient (of the same 16-bit values) bounds the rounding of the 16-bit sums.
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(dtype));
    const bool narrow = dtype == DType::BFloat16 || dtype == DType::Float16;
    const Tensor tokens = ints(7, {16, 40}, gen), dy = randn({16, 40, 33}, {}, &gen).to(dtype);
    const Tensor table = randn({7, 33}, {}, &gen).to(dtype);
    Tensor table_cpu = (narrow ? table.to(DType::Float32) : table.clone()).requires_grad_(true);
    embedding(table_cpu, tokens).backward(narrow ? dy.to(DType::Float32) : dy);
    Tensor grads[2];
    for (Tensor& grad : grads) {
      Tensor table_gpu = table.to(testing::test_gpu()).requires_grad_(true);
      embedding(table_gpu, tokens.to(testing::test_gpu())).backward(dy.to(testing::test_gpu()));
      grad = table_gpu.grad().cpu().to(DType::Float64);
    }
    CHECK_CLOSE(grads[1], grads[0], 0, 0);
    // About 90 rounded adds a row, into partial sums up to about 10: float16 was 0.073 off at most (H100).
    const double tol = narrow ? 1e-1 : 0;
    CHECK_CLOSE(grads[0], table_cpu.grad().to(DType::Float64), tol, tol);
  }
}

LOOM_GPU_TEST_CASE("scatter on the GPU keeps one of the values written to a place") {
  const Device gpu = testing::test_gpu();
  const Tensor src = arange(20, {.dtype = DType::Float32, .device = gpu}).reshape({5, 4});  // src[i][j] = 4i + j
  const Tensor out = scatter(zeros({3, 4}, {.device = gpu}), 0, zeros({5, 4}, {.dtype = DType::Int64, .device = gpu}),
                             src).cpu();
  for (int64_t j = 0; j < 4; ++j) {
    const double kept = out.at({0, j});
    CHECK(std::fmod(kept - static_cast<double>(j), 4.0) == 0.0);
    CHECK(kept >= 0.0);
    CHECK(kept < 20.0);
    CHECK(out.at({1, j}) == 0.0);
  }
}

LOOM_GPU_TEST_CASE("bincount, masked_select, nonzero and argwhere match the CPU on the GPU") {
  Generator gen(65);
  for (int64_t n : {0, 1, 37, 5000}) {
    const Tensor labels = ints(23, {n}, gen);
    const Tensor w32 = randn({n}, {}, &gen), w64 = randn({n}, {.dtype = DType::Float64}, &gen);
    const MemoryFormat f = MemoryFormat::Contiguous;
    check_parity("bincount", [](auto& in) { return bincount(in[0]); }, {labels}, f, 0.0, gen);
    check_parity("bincount(minlength)", [](auto& in) { return bincount(in[0].to(DType::Int32), {}, 30); }, {labels},
                 f, 0.0, gen);
    check_parity("bincount(float32)", [](auto& in) { return bincount(in[0], in[1]); }, {labels, w32}, f, 1e-5, gen);
    check_parity("bincount(float64)", [](auto& in) { return bincount(in[0], in[1], 25); }, {labels, w64}, f, 1e-12,
                 gen);
  }
  for (MemoryFormat f : kLayouts) {
    const Tensor x = leaf({2, 3, 5, 7}, gen), mask = randn({2, 3, 5, 7}, {}, &gen) > 0.2;
    const Tensor row = leaf({7}, gen), sparse = randn({2, 3, 5, 7}, {}, &gen) * (mask.to(DType::Float32));
    check_parity("masked_select", [](auto& in) { return masked_select(in[0], in[1]); }, {x, mask}, f, 0.0, gen);
    check_parity("masked_select(broadcast)", [](auto& in) { return masked_select(in[2], in[1]); }, {x, mask, row},
                 f, 1e-6, gen);
    check_parity("nonzero", [](auto& in) { return nonzero(in[0]); }, {sparse}, f, 0.0, gen);
    check_parity("nonzero(Bool)", [](auto& in) { return nonzero(in[0]); }, {mask}, f, 0.0, gen);
    check_parity("argwhere(int64)", [](auto& in) { return argwhere(in[0]); }, {ints(3, {4, 9}, gen)}, f, 0.0, gen);
  }
}

LOOM_GPU_TEST_CASE("the scatter family in a CUDA graph: scatters replay, data-sized ops are refused") {
  Generator gen(66);
  const Device gpu = testing::test_gpu();
  const TensorOptions i64 = {.dtype = DType::Int64, .device = gpu};
  Tensor x = randn({6, 8}, {}, &gen).to(gpu), src = randn({4, 8}, {}, &gen).to(gpu);
  Tensor index = randint(0, 6, {4, 8}, i64, &gen), ids = randint(0, 6, {4}, i64, &gen);
  auto work = [&] {
    return std::vector<Tensor>{scatter_add(x, 0, index, src), scatter(x, 0, index, 2.0),
                               index_add(x, 0, ids, src, -1.0)};
  };
  const Tensor positive = x > 0.0;
  work();
  cuda::synchronize();
  cuda::CudaGraph graph;
  std::vector<Tensor> captured;
  graph.capture([&] {
    captured = work();
    CHECK_THROWS_WITH_FRAGMENT(bincount(ids), ValueError, "[bincount] the result's size depends on the values");
    CHECK_THROWS_WITH_FRAGMENT(nonzero(x), ValueError, "inside a CUDA-graph capture");
    CHECK_THROWS_WITH_FRAGMENT(masked_select(x, positive), ValueError, "[masked_select] the result's size");
  });
  for (int replay = 0; replay < 2; ++replay) {
    x.copy_(randn({6, 8}, {}, &gen));
    src.copy_(randn({4, 8}, {}, &gen));
    index.copy_(randint(0, 6, {4, 8}, {.dtype = DType::Int64}, &gen));
    graph.replay();
    const Tensor hx = x.cpu(), hsrc = src.cpu(), hindex = index.cpu(), hids = ids.cpu();
    CHECK(testing::normalized_error(captured[0].cpu(), scatter_add(hx, 0, hindex, hsrc)) <= 1e-6);
    CHECK(testing::normalized_error(captured[1].cpu(), scatter(hx, 0, hindex, 2.0)) == 0.0);
    CHECK(testing::normalized_error(captured[2].cpu(), index_add(hx, 0, hids, hsrc, -1.0)) <= 1e-6);
  }
}
