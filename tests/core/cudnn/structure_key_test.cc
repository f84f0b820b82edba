// File: tests/core/cudnn/structure_key_test.cc
// The kernel cache's structure key (core/cudnn/kernel_cache.h): graphs that
// differ only in batch size share one, so they share compiled kernels; a
// difference in channels, op, dtype, layout, pointer alignment, policy or
// device gives another. Which graphs may use a kernel cache at all.
// Graphs are data, so this needs no GPU (but the CUDA build: it links cuDNN).
//
// N batch, C channels, H, W; K out channels, R, S filter; M rows, In, Out features.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include "core/cudnn/kernel_cache.h"
#include "core/cudnn/plan_cache.h"

using namespace loom;
using namespace loom::cudnn;

namespace {

enum Uid : int64_t { kX = 1, kW, kY, kConv, kB };

enum class Layout { Nchw, Nhwc };

TensorSpec dense(int64_t uid, const std::vector<int64_t>& nchw, Layout layout,
                 cudnnDataType_t dtype = CUDNN_DATA_FLOAT) {
  const int64_t c = nchw[1], h = nchw[2], w = nchw[3];
  std::vector<int64_t> strides = layout == Layout::Nchw ? std::vector<int64_t>{c * h * w, h * w, w, 1}
                                                        : std::vector<int64_t>{h * w * c, 1, w * c, c};
  return {.uid = uid, .dims = nchw, .strides = strides, .dtype = dtype};
}

struct ConvShape {
  int64_t n = 8, c = 16, k = 32;
  Layout layout = Layout::Nhwc;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnPointwiseMode_t activation = CUDNN_POINTWISE_RELU_FWD;
};

// y (N, K, 10, 10) = activation(conv(x (N, C, 10, 10), w (K, C, 3, 3))), padding 1.
Graph conv_activation(const ConvShape& s) {
  Graph g;
  g.add_tensor(dense(kX, {s.n, s.c, 10, 10}, s.layout, s.dtype));
  g.add_tensor(dense(kW, {s.k, s.c, 3, 3}, s.layout, s.dtype));
  g.add_tensor(dense(kY, {s.n, s.k, 10, 10}, s.layout, s.dtype));
  TensorSpec conv = dense(kConv, {s.n, s.k, 10, 10}, s.layout);
  conv.is_virtual = true;
  g.add_tensor(conv);
  g.conv(ConvDirection::Forward, kX, kW, kConv, {.pad_h = 1, .pad_w = 1}, CUDNN_DATA_FLOAT);
  g.pointwise(s.activation, kConv, std::nullopt, kY);
  return g;
}

TensorSpec matrix(int64_t uid, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  return {.uid = uid, .dims = {1, rows, cols}, .strides = {rows * cols, row_stride, col_stride}};
}

// y (1, M, Out) = x (1, M, In) . w^T, w (Out, In) row-major.
Graph linear(int64_t m, int64_t in, int64_t out) {
  Graph g;
  g.add_tensor(matrix(kX, m, in, in, 1));
  g.add_tensor(matrix(kW, in, out, 1, in));
  g.add_tensor(matrix(kY, m, out, out, 1));
  g.matmul(kX, kW, kY, CUDNN_DATA_FLOAT);
  return g;
}

// y = relu(x), (N, 8, 6, 6) NHWC, x's pointer aligned to `x_alignment` bytes.
Graph relu(int64_t n, int64_t x_alignment = 16) {
  Graph g;
  TensorSpec x = dense(kX, {n, 8, 6, 6}, Layout::Nhwc);
  x.alignment = x_alignment;
  g.add_tensor(x);
  g.add_tensor(dense(kY, {n, 8, 6, 6}, Layout::Nhwc));
  g.pointwise(CUDNN_POINTWISE_RELU_FWD, kX, std::nullopt, kY);
  return g;
}

// y = 2x2 max pool of x (N, 8, 6, 6), NHWC.
Graph max_pool(int64_t n) {
  Graph g;
  g.add_tensor(dense(kX, {n, 8, 6, 6}, Layout::Nhwc));
  g.add_tensor(dense(kY, {n, 8, 3, 3}, Layout::Nhwc));
  g.resample_forward({.window = {2, 2}, .stride = {2, 2}, .pre_padding = {0, 0}, .post_padding = {0, 0}},
                     kX, kY, std::nullopt);
  return g;
}

PlanNotes compiled_kernel(int64_t engine_id, const std::string& knob) {
  PlanNotes notes;
  notes.engine_id = engine_id;
  notes.knobs = {knob};
  notes.kernel = KernelSource::Compiled;
  return notes;
}

StructureKey structure(const Graph& g, NumericsPolicy policy = {}, int device = 0) {
  return StructureKey(g, policy, device);
}

}  // namespace

TEST_CASE("graphs that differ only in batch size share one structure key, not one plan key") {
  for (int64_t n : {1, 96, 128, 1000}) {
    CAPTURE(n);
    const Graph a = conv_activation({.n = 128}), b = conv_activation({.n = n});
    CHECK(structure(a) == structure(b));
    CHECK(structure(a).hash() == structure(b).hash());
    CHECK((PlanKey(a, {}, 0) == PlanKey(b, {}, 0)) == (n == 128));
  }
  SUBCASE("a batch equal to the out channels is still only the batch") {
    CHECK(structure(conv_activation({.n = 32, .k = 32})) == structure(conv_activation({.n = 8, .k = 32})));
  }
  SUBCASE("in a matmul graph the batch is the rows") {
    CHECK(structure(linear(128, 64, 10)) == structure(linear(96, 64, 10)));
  }
}

TEST_CASE("channels, op, dtype, layout, policy and device each make another structure") {
  const StructureKey base = structure(conv_activation({}));
  CHECK_FALSE(base == structure(conv_activation({.c = 8})));
  CHECK_FALSE(base == structure(conv_activation({.k = 16})));
  CHECK_FALSE(base == structure(conv_activation({.activation = CUDNN_POINTWISE_TANH_FWD})));
  CHECK_FALSE(base == structure(conv_activation({.dtype = CUDNN_DATA_HALF})));
  CHECK_FALSE(base == structure(conv_activation({.layout = Layout::Nchw})));
  CHECK_FALSE(base == structure(conv_activation({}), {.precision = Precision::StrictFp32}));
  CHECK_FALSE(base == structure(conv_activation({}), {}, 1));
  CHECK_FALSE(structure(linear(128, 64, 10)) == structure(linear(128, 32, 10)));
  CHECK_FALSE(structure(linear(128, 64, 10)) == structure(linear(128, 64, 20)));
}

TEST_CASE("a pointer at a smaller alignment makes another structure") {
  CHECK(structure(relu(128)) == structure(relu(96)));
  CHECK_FALSE(structure(relu(128)) == structure(relu(128, 4)));
  CHECK_FALSE(structure(relu(128, 8)) == structure(relu(128, 4)));
}

TEST_CASE("kernel caches are for fully aligned pointwise and normalization graphs only") {
  CHECK(kernel_cache_applies(relu(128)));
  CHECK(kernel_cache_applies(relu(1000)));
  // A view at an offset: its graph keeps the static build.
  CHECK_FALSE(kernel_cache_applies(relu(128, 4)));
  CHECK_FALSE(kernel_cache_applies(relu(128, 8)));
  CHECK_FALSE(kernel_cache_applies(max_pool(128)));
  CHECK_FALSE(kernel_cache_applies(conv_activation({})));
  CHECK_FALSE(kernel_cache_applies(linear(128, 64, 10)));
}

TEST_CASE("a kernel cache remembers refusals and choices by kernel, whatever the dims") {
  KernelCache kernels(structure(conv_activation({})), {});
  const PlanNotes tile3 = compiled_kernel(7, "TILE_SIZE=3"), tile4 = compiled_kernel(7, "TILE_SIZE=4");
  CHECK(kernels.may_try(tile3));
  kernels.refuse(tile3);
  CHECK_FALSE(kernels.may_try(tile3));
  CHECK(kernels.may_try(tile4));
  CHECK(kernels.refused() == 1);
  kernels.refuse_structure();
  CHECK_FALSE(kernels.may_try(tile4));
  CHECK(kernels.refused() == 2);

  CHECK_FALSE(kernels.was_chosen(tile4));
  kernels.remember_chosen(tile4);
  CHECK(kernels.was_chosen(tile4));
  PlanNotes precompiled;
  precompiled.engine_id = 3;
  kernels.remember_chosen(precompiled);  // a static kernel is nothing to share
  CHECK_FALSE(kernels.was_chosen(precompiled));
  // Chosen kernels come back from the plan files.
  KernelCache restored(structure(conv_activation({})), {.contents = "", .chosen = {kernel_name(tile4)}});
  CHECK(restored.was_chosen(tile4));
  CHECK_FALSE(restored.was_chosen(tile3));
}

TEST_CASE("kernel sources read back from their names") {
  for (KernelSource source : {KernelSource::Static, KernelSource::Compiled, KernelSource::Reused}) {
    CHECK(parse_kernel_source(kernel_source_name(source)) == source);
  }
  CHECK_FALSE(parse_kernel_source("cached").has_value());
}
#endif
