// File: tests/core/cuda/reduce_gpu_test.cc
// The CUDA reductions against the CPU reference kernels on the same inputs:
// Sum/Mean/Max/Min over every kind of dim set and layout, every kernel path
// (a thread per output for extents up to 64, above that a block per output or
// the columns kernel for outputs adjacent in memory, long extents in slices),
// 1e6-element sums, many small outputs, NaN, empty extents; max_along with ties
// and NaN; scatter_add_along. GPU outputs start as NaN (indices as -1).
//
// Tolerances. Max, Min, max_along and scatter_add_along are exact (0, 0). The CPU
// sums in double; the GPU sums float32 in float (each thread every 256th
// element, then a tree), so a float32 sum of R standard normals is off by
// ~1e-6 * sqrt(R): worst of 10 trials 1.3e-6 at R = 64, 2.6e-3 at R = 1e6 (a host
// replay of that order). atol max(1e-5, 1e-7 * R) leaves 8x to 40x of margin.
// To catch a lost or doubled element despite that slack, sums of small integers
// (exact in float below 2^24) are compared exactly. float64 uses rtol 1e-12 and
// atol max(1e-15, 1e-15 * R).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/cpu/reduce.h"
#include "core/cuda/reduce.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kDtypes[] = {DType::Float32, DType::Float64};
constexpr kernel::ReduceOp kOps[] = {kernel::ReduceOp::Sum, kernel::ReduceOp::Mean, kernel::ReduceOp::Max,
                                  kernel::ReduceOp::Min};
const Shape kSizes = {2, 3, 5, 7};

// A (2, 3, 5, 7) view of a base tensor, taken alike on the CPU and the GPU.
struct Layout {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {"nchw", {2, 3, 5, 7}, [](const Tensor& t) { return t; }},
      {"channels_last", {2, 3, 5, 7},
       [](const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }},
      {"sliced", {2, 3, 10, 9}, [](const Tensor& t) { return t.slice(2, 1, 10, 2).slice(3, 1, 8); }},
      {"permuted", {7, 5, 3, 2}, [](const Tensor& t) { return t.permute({3, 2, 1, 0}); }},
  };
  return all;
}

struct Operand {
  Tensor cpu, gpu;
};

Operand operand(const Layout& layout, const Tensor& base) {
  return {layout.view(base), layout.view(base.to(testing::test_gpu()))};
}

Operand dense_operand(const Tensor& t) { return {t, t.to(testing::test_gpu())}; }

Shape keepdim_sizes(const Shape& sizes, const Shape& dims) {
  Shape out = sizes;
  for (int64_t d : dims) out[d] = 1;
  return out;
}

bool is_exact(kernel::ReduceOp op) { return op == kernel::ReduceOp::Max || op == kernel::ReduceOp::Min; }

void check_sum_close(const Tensor& actual, const Tensor& expected, kernel::ReduceOp op, int64_t extent) {
  if (is_exact(op)) {
    CHECK_CLOSE(actual, expected, 0, 0);
  } else if (expected.dtype() == DType::Float32) {
    // Mean divides the error by the extent; the sum's bound covers both.
    CHECK_CLOSE(actual, expected, 1e-5, std::max(1e-5, 1e-7 * extent));
  } else {
    CHECK_CLOSE(actual, expected, 1e-12, std::max(1e-15, 1e-15 * extent));
  }
}

// Reduces x over `dims` on both devices and compares.
void check_reduce(const Operand& x, const Shape& dims, kernel::ReduceOp op) {
  const Shape out_sizes = keepdim_sizes(x.cpu.sizes(), dims);
  const DType dtype = x.cpu.dtype();
  Tensor out = full(out_sizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
  Tensor expected = empty(out_sizes, {.dtype = dtype});
  cuda::reduce(out.strided(), x.gpu.strided(), op);
  cpu::reduce(expected.strided(), x.cpu.strided(), op);
  check_sum_close(out.cpu(), expected, op, x.cpu.numel() / std::max<int64_t>(1, expected.numel()));
}

// Values 0..levels-1: sums are exact in float32, and maxima repeat (ties).
Tensor small_integers(const Shape& sizes, DType dtype, int64_t levels, Generator& gen) {
  return randint(0, levels, sizes, {.dtype = DType::Int64}, &gen).to(dtype);
}

// max_along over `dim` on both devices: values and indices exactly (ties go to
// the first occurrence on both).
void check_max_along(const Operand& x, int64_t dim) {
  const DType dtype = x.cpu.dtype();
  const Shape out_sizes = keepdim_sizes(x.cpu.sizes(), {dim});
  Tensor values = full(out_sizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
  Tensor indices = full(out_sizes, -1, {.dtype = DType::Int64, .device = testing::test_gpu()});
  Tensor expected_values = empty(out_sizes, {.dtype = dtype});
  Tensor expected_indices = empty(out_sizes, {.dtype = DType::Int64});
  cuda::max_along(values.strided(), indices.strided(), x.gpu.strided(), dim);
  cpu::max_along(expected_values.strided(), expected_indices.strided(), x.cpu.strided(), dim);
  CHECK_CLOSE(values.cpu(), expected_values, 0, 0);
  CHECK_CLOSE(indices.cpu(), expected_indices, 0, 0);
}

// Every op over `dims`: the normals against the CPU within rounding, the small
// integers' results exactly (their sums are exact in every dtype).
void check_normals_and_integers(const Operand& normals, const Operand& ints, const Shape& dims) {
  const DType dtype = ints.cpu.dtype();
  for (kernel::ReduceOp op : kOps) {
    CAPTURE(static_cast<int>(op));
    check_reduce(normals, dims, op);
    const Shape out_sizes = keepdim_sizes(ints.cpu.sizes(), dims);
    Tensor out = full(out_sizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
    Tensor expected = empty(out_sizes, {.dtype = dtype});
    cuda::reduce(out.strided(), ints.gpu.strided(), op);
    cpu::reduce(expected.strided(), ints.cpu.strided(), op);
    CHECK_CLOSE(out.cpu(), expected, 0, 0);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("reduce matches the CPU for every op, dim set, dtype and layout") {
  Generator gen(201);
  const Shape dim_sets[] = {{}, {0}, {1}, {3}, {2, 3}, {0, 2}, {0, 1, 2, 3}};
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      Operand x = operand(layout, randn(layout.base, {.dtype = dtype}, &gen));
      for (const Shape& dims : dim_sets) {
        for (kernel::ReduceOp op : kOps) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(layout.name);
          CAPTURE(shape_str(dims));
          CAPTURE(static_cast<int>(op));
          check_reduce(x, dims, op);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("a hand-checked sum, mean, max and min of a (2, 3) matrix") {
  Tensor x = tensor({1, -2, 3, 4, 5, -6}, {2, 3}).to(testing::test_gpu());
  Tensor rows = full({2, 1}, kNaN, {.device = testing::test_gpu()});
  Tensor cols = full({1, 3}, kNaN, {.device = testing::test_gpu()});
  cuda::reduce(rows.strided(), x.strided(), cuda::ReduceOp::Sum);
  CHECK(testing::values(rows) == std::vector<double>{2, 3});
  cuda::reduce(cols.strided(), x.strided(), cuda::ReduceOp::Mean);
  CHECK(testing::values(cols) == std::vector<double>{2.5, 1.5, -1.5});
  cuda::reduce(rows.strided(), x.strided(), cuda::ReduceOp::Max);
  CHECK(testing::values(rows) == std::vector<double>{3, 5});
  cuda::reduce(cols.strided(), x.strided(), cuda::ReduceOp::Min);
  CHECK(testing::values(cols) == std::vector<double>{1, -2, -6});
}

LOOM_GPU_TEST_CASE("summing 1e6 elements: exact on small integers, close on normals") {
  Generator gen(202);
  const Shape sizes = {1000000};
  for (DType dtype : kDtypes) {
    CAPTURE(dtype_name(dtype));
    Operand ints = dense_operand(small_integers(sizes, dtype, 4, gen));
    Tensor out = full({1}, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
    Tensor expected = empty({1}, {.dtype = dtype});
    for (kernel::ReduceOp op : kOps) {
      CAPTURE(static_cast<int>(op));
      cuda::reduce(out.strided(), ints.gpu.strided(), op);
      cpu::reduce(expected.strided(), ints.cpu.strided(), op);
      CHECK_CLOSE(out.cpu(), expected, 0, 0);
    }
    Operand normals = dense_operand(randn(sizes, {.dtype = dtype}, &gen));
    for (kernel::ReduceOp op : kOps) check_reduce(normals, {0}, op);
  }
}

LOOM_GPU_TEST_CASE("many small outputs and few large ones, along inner and outer dims") {
  Generator gen(203);
  struct Case {
    Shape sizes, dims;
  };
  const Case cases[] = {
      {{100000, 3}, {1}},  {{3, 100000}, {0}},  // 1e5 outputs of 3: a thread each
      {{1000, 1000}, {0}}, {{1000, 1000}, {1}},  // 1000 outputs of 1000: a block each
      {{3, 1000003}, {1}}, {{7, 65}, {1}},      // few large ones; just past the serial limit
      {{70000, 65}, {1}},                       // more outputs than one grid of blocks
  };
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(c.sizes));
      CAPTURE(shape_str(c.dims));
      Operand ints = dense_operand(small_integers(c.sizes, dtype, 4, gen));
      Operand normals = dense_operand(randn(c.sizes, {.dtype = dtype}, &gen));
      check_normals_and_integers(normals, ints, c.dims);
    }
  }
}

// Few outputs over long extents are cut into slices whose partials a second
// kernel merges; outputs that lie closer in memory than their elements (a
// channels-last channel sum) are read by the columns kernel.
LOOM_GPU_TEST_CASE("sliced extents: channels-last channel sums, columns and rows, sums exact on integers") {
  Generator gen(206);
  struct Case {
    Shape sizes, dims;
    bool channels_last;
  };
  const Case cases[] = {
      {{64, 16, 32, 32}, {0, 2, 3}, true},   // 16 channel sums of 65536: columns, 32 slices
      {{8, 24, 30, 30}, {0, 2, 3}, true},    // 24 outputs, extent 7200 not a multiple of the slice
      {{8, 24, 30, 30}, {0, 2, 3}, false},   // the same in NCHW: a block per output, sliced
      {{4096, 40}, {0}, false},              // columns across two blocks of outputs, two slices
      {{2, 300, 5000}, {0, 2}, false},       // 300 outputs over two reduced dims
  };
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(c.sizes));
      CAPTURE(c.channels_last);
      const MemoryFormat format = c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
      Operand ints = dense_operand(small_integers(c.sizes, dtype, 4, gen).contiguous(format));
      Operand normals = dense_operand(randn(c.sizes, {.dtype = dtype}, &gen).contiguous(format));
      check_normals_and_integers(normals, ints, c.dims);
    }
  }
}

// Prod on every kernel path: factors of +-1 multiply exactly in any order, so
// those products must match the CPU's bits; factors in [0.99, 1.01] stay finite
// over a million elements, and the float32 product's rounding grows about as the
// square root of the extent.
LOOM_GPU_TEST_CASE("Prod matches the CPU on every layout and kernel path: signs exactly, factors near 1 closely") {
  std::mt19937_64 rng(207);
  std::bernoulli_distribution coin(0.5);
  std::uniform_real_distribution<double> near(0.99, 1.01);
  struct Case {
    Shape sizes, dims;
  };
  const Case cases[] = {
      {{2, 3, 5, 7}, {}},         {{2, 3, 5, 7}, {1}},       {{2, 3, 5, 7}, {0, 2}},
      {{2, 3, 5, 7}, {0, 1, 2, 3}}, {{100000, 3}, {1}},      {{1000, 1000}, {0}},
      {{3, 1000003}, {1}},        {{64, 16, 32, 32}, {0, 2, 3}}, {{4096, 40}, {0}},
  };
  for (DType dtype : kDtypes) {
    for (const Case& c : cases) {
      for (bool channels_last : {false, true}) {
        if (channels_last && c.sizes.size() != 4) continue;
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(c.sizes));
        CAPTURE(shape_str(c.dims));
        CAPTURE(channels_last);
        const MemoryFormat format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
        std::vector<double> sign_values(numel_of(c.sizes)), near_values(numel_of(c.sizes));
        for (double& v : sign_values) v = coin(rng) ? 1.0 : -1.0;
        for (double& v : near_values) v = near(rng);
        const Tensor signs = tensor(sign_values, c.sizes, {.dtype = dtype});
        const Tensor near_one = tensor(near_values, c.sizes, {.dtype = dtype});
        const Shape out_sizes = keepdim_sizes(c.sizes, c.dims);
        const int64_t extent = numel_of(c.sizes) / numel_of(out_sizes);
        const double rtol = (dtype == DType::Float32 ? 2e-7 : 1e-15) * std::sqrt(static_cast<double>(extent));
        const std::pair<Tensor, double> inputs[] = {{signs, 0.0}, {near_one, rtol + 1e-6}};
        for (const auto& [factors, tolerance] : inputs) {
          const Operand x = dense_operand(factors.contiguous(format));
          Tensor out = full(out_sizes, kNaN, {.dtype = dtype, .device = testing::test_gpu()});
          Tensor expected = empty(out_sizes, {.dtype = dtype});
          cuda::reduce(out.strided(), x.gpu.strided(), cuda::ReduceOp::Prod);
          cpu::reduce(expected.strided(), x.cpu.strided(), kernel::ReduceOp::Prod);
          CHECK_CLOSE(out.cpu(), expected, tolerance, 0);
        }
      }
    }
  }
}

LOOM_GPU_TEST_CASE("NaN propagates through Sum, Max and Min on both kernel paths") {
  for (DType dtype : kDtypes) {
    for (int64_t extent : {5, 1000}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(extent);
      std::vector<double> values(2 * extent, 1.0);
      values[extent / 2] = kNaN;              // row 0: one NaN in the middle
      values[2 * extent - 1] = kNaN;          // row 1: NaN last, after larger values
      values[extent] = 100.0;
      Tensor x = tensor(values, {2, extent}, {.dtype = dtype}).to(testing::test_gpu());
      Tensor out = full({2, 1}, 0.0, {.dtype = dtype, .device = testing::test_gpu()});
      for (kernel::ReduceOp op : kOps) {
        CAPTURE(static_cast<int>(op));
        out.fill_(0.0);
        cuda::reduce(out.strided(), x.strided(), op);
        std::vector<double> result = testing::values(out);
        CHECK(std::isnan(result[0]));
        CHECK(std::isnan(result[1]));
      }
    }
  }
}

LOOM_GPU_TEST_CASE("an empty reduced extent gives the identities; empty outputs are fine") {
  // As the CPU: sum 0, mean 0 / 0 = NaN, max -inf, min +inf, prod 1.
  Tensor x = empty({3, 0}, {.device = testing::test_gpu()});
  Tensor out = full({3, 1}, 7.0, {.device = testing::test_gpu()});
  cuda::reduce(out.strided(), x.strided(), cuda::ReduceOp::Sum);
  CHECK(testing::values(out) == std::vector<double>{0, 0, 0});
  cuda::reduce(out.strided(), x.strided(), cuda::ReduceOp::Mean);
  for (double v : testing::values(out)) CHECK(std::isnan(v));
  cuda::reduce(out.strided(), x.strided(), cuda::ReduceOp::Max);
  CHECK(testing::values(out) == std::vector<double>{-kInf, -kInf, -kInf});
  cuda::reduce(out.strided(), x.strided(), cuda::ReduceOp::Min);
  CHECK(testing::values(out) == std::vector<double>{kInf, kInf, kInf});
  cuda::reduce(out.strided(), x.strided(), cuda::ReduceOp::Prod);
  CHECK(testing::values(out) == std::vector<double>{1, 1, 1});
  Tensor none = empty({0, 5}, {.device = testing::test_gpu()});
  Tensor no_out = empty({0, 1}, {.device = testing::test_gpu()});
  cuda::reduce(no_out.strided(), none.strided(), cuda::ReduceOp::Sum);
  CHECK(no_out.numel() == 0);
}

LOOM_GPU_TEST_CASE("max_along matches the CPU, ties to the first occurrence, every dim and layout") {
  Generator gen(204);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      Operand x = operand(layout, small_integers(layout.base, dtype, 3, gen));  // many ties
      for (int64_t dim = 0; dim < 4; ++dim) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(layout.name);
        CAPTURE(dim);
        check_max_along(x, dim);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("max_along over long rows (the block path) keeps the first maximum") {
  Generator gen(205);
  for (DType dtype : kDtypes) {
    for (const Shape& sizes : {Shape{3, 5000}, Shape{70000, 65}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      Operand x = dense_operand(small_integers(sizes, dtype, 10, gen));
      check_max_along(x, 1);
    }
  }
}

LOOM_GPU_TEST_CASE("max_along down long columns (columns kernel, sliced) keeps the first maximum") {
  Generator gen(207);
  for (DType dtype : kDtypes) {
    for (const Shape& sizes : {Shape{5000, 3}, Shape{9000, 40}}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str(sizes));
      Operand x = dense_operand(small_integers(sizes, dtype, 10, gen));
      check_max_along(x, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("max_along: the first NaN wins, otherwise the first maximum") {
  for (int64_t extent : {6, 600}) {  // both kernel paths
    CAPTURE(extent);
    std::vector<double> row0(extent, 0.0), row1(extent, 0.0);
    row0[1] = 3, row0[2] = 3, row0[3] = kNaN, row0[4] = 9, row0[5] = kNaN;
    row1[2] = 3, row1[4] = 3, row1[extent - 1] = -1;
    row0.insert(row0.end(), row1.begin(), row1.end());
    Tensor x = tensor(row0, {2, extent}).to(testing::test_gpu());
    Tensor values = full({2, 1}, 0.0, {.device = testing::test_gpu()});
    Tensor indices = full({2, 1}, -1, {.dtype = DType::Int64, .device = testing::test_gpu()});
    cuda::max_along(values.strided(), indices.strided(), x.strided(), 1);
    std::vector<double> v = testing::values(values);
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == 3);
    CHECK(testing::values(indices) == std::vector<double>{3, 2});
  }
}

LOOM_GPU_TEST_CASE("scatter_add_along adds dy at the max positions, every dim and layout") {
  Generator gen(206);
  for (DType dtype : kDtypes) {
    for (const Layout& layout : layouts()) {
      Operand x = operand(layout, randn(layout.base, {.dtype = dtype}, &gen));
      for (int64_t dim = 0; dim < 4; ++dim) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(layout.name);
        CAPTURE(dim);
        const Shape out_sizes = keepdim_sizes(kSizes, {dim});
        Tensor max_values = empty(out_sizes, {.dtype = dtype});
        Tensor indices = empty(out_sizes, {.dtype = DType::Int64});
        cpu::max_along(max_values.strided(), indices.strided(), x.cpu.strided(), dim);
        Tensor dy = randn(out_sizes, {.dtype = dtype}, &gen);
        // dx starts non-zero (and laid out as x) to show the kernel adds.
        Operand dx = operand(layout, randn(layout.base, {.dtype = dtype}, &gen));
        Tensor expected = dx.cpu.clone();
        cuda::scatter_add_along(dx.gpu.strided(), dy.to(testing::test_gpu()).strided(),
                                indices.to(testing::test_gpu()).strided(), dim);
        cpu::scatter_add_along(expected.strided(), dy.strided(), indices.strided(), dim);
        CHECK_CLOSE(dx.gpu.cpu(), expected, 0, 0);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("scatter_add_along: a hand-checked (2, 3) case") {
  Tensor dx = tensor({1, 1, 1, 1, 1, 1}, {2, 3}).to(testing::test_gpu());
  Tensor dy = tensor({10, 20}, {2, 1}).to(testing::test_gpu());
  Tensor indices = tensor({2, 0}, {2, 1}, {.dtype = DType::Int64}).to(testing::test_gpu());
  cuda::scatter_add_along(dx.strided(), dy.strided(), indices.strided(), 1);
  CHECK(testing::values(dx) == std::vector<double>{1, 1, 11, 21, 1, 1});
}
#endif  // LOOM_WITH_CUDA
