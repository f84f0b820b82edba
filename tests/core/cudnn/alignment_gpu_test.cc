// File: tests/core/cudnn/alignment_gpu_test.cc
// Tensors whose data pointer sits 0 to 4 elements into a larger buffer (16,
// 4, 8, 4 and 16 bytes aligned for float32; 16, 2, 4, 2, 8 for bfloat16), in
// both layouts, through the public ops and the cuDNN layer, against the CPU
// reference. On the H100 such views once ended in cudaErrorMisalignedAddress,
// which loses the process: a pass here means no engine saw a pointer less
// aligned than it assumes. Keys are met aligned first, then under-aligned, and
// the reverse.
//
// N batch, C channels, H, W input, K out channels; M rows, In, Out features.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cmath>

#include "core/cpu/conv.h"
#include "core/cpu/pool.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/pointwise.h"
#include "core/cudnn/pool.h"
#include "core/cudnn/tensor_spec.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

constexpr int64_t kN = 128, kC = 8, kH = 8, kW = 8, kK = 8;
const int64_t kOffsets[] = {0, 1, 2, 3, 4};

struct Setting {
  DType dtype;
  MemoryFormat format;
  int64_t offset;
};

// Loose enough for tf32 and bf16 rounding; a shifted or garbage read is off by O(1).
double tolerance(DType dtype) { return dtype == DType::BFloat16 ? 5e-2 : 1e-2; }

// `values` (float32, CPU) rounded to the setting's dtype and back: the CPU reference's input.
Tensor rounded(const Tensor& values, DType dtype) { return values.to(dtype).to(DType::Float32); }

// A GPU view of `values`' shape in the setting's layout and dtype whose first
// element sits `offset` elements into its storage; the rest of the storage is NaN.
Tensor offset_view(const Tensor& values, const Setting& s) {
  const Shape& sizes = values.sizes();
  const int64_t n = values.numel();
  Tensor flat = full({s.offset + n}, NAN, {.dtype = s.dtype, .device = testing::test_gpu()});
  Tensor body = flat.narrow(0, s.offset, n);
  Tensor view = body.view(sizes);
  if (sizes.size() == 4 && s.format == MemoryFormat::ChannelsLast) {
    view = body.view({sizes[0], sizes[2], sizes[3], sizes[1]}).permute({0, 3, 1, 2});
  }
  view.copy_(values);
  return view;
}

// A GPU leaf view (as offset_view) that collects a gradient.
Tensor offset_leaf(const Tensor& values, const Setting& s) {
  return offset_view(values, s).requires_grad_(true);
}

Tensor as_reference(const Tensor& gpu) { return gpu.detach().cpu().to(DType::Float32); }

// The CPU's upstream gradient for a fused op: dy where the GPU's own output is
// positive. Under tf32 or bf16 a pre-activation near zero can land on the other
// side of the ReLU than on the CPU; the reference takes the GPU's decisions,
// so only a misread view (or a wrong kernel) can move a gradient.
Tensor through_gpu_relu(const Tensor& dy, const Tensor& gpu_y) {
  return mul(dy, gt(as_reference(gpu_y), 0.0).to(DType::Float32));
}

void relu_matches(const Setting& s, Generator& gen) {
  Tensor x = rounded(randn({kN, kC, kH, kW}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor dy = rounded(randn(x.sizes(), {}, &gen), s.dtype);
  Tensor gx = offset_leaf(x.detach(), s);
  Tensor y = relu(x), gy = relu(gx);
  CHECK_CLOSE(as_reference(gy), y, 0, 0);
  y.backward(dy);
  gy.backward(offset_view(dy, s));
  CHECK_CLOSE(as_reference(gx.grad()), x.grad(), 0, 0);
}

void pool_matches(const Setting& s, bool max, Generator& gen) {
  CAPTURE(max);
  const Pool2dOptions options{.kernel_size = {2, 2}};
  auto pool = [&](const Tensor& t) { return max ? max_pool2d(t, options) : avg_pool2d(t, options); };
  Tensor x = rounded(randn({kN, kC, kH, kW}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor gx = offset_leaf(x.detach(), s);
  Tensor y = pool(x), gy = pool(gx);
  Tensor dy = rounded(randn(y.sizes(), {}, &gen), s.dtype);
  CHECK_CLOSE(as_reference(gy), y, tolerance(s.dtype), tolerance(s.dtype));
  y.backward(dy);
  gy.backward(offset_view(dy, s));
  CHECK_CLOSE(as_reference(gx.grad()), x.grad(), tolerance(s.dtype), tolerance(s.dtype));
}

// batch norm, or the fused batch norm -> relu (its masked cuDNN graphs), forward and backward.
void batch_norm_matches(const Setting& s, bool relu, Generator& gen) {
  CAPTURE(relu);
  Tensor x = randn({kN, kC, kH, kW}, {}, &gen).requires_grad_(true);
  Tensor weight = randn({kC}, {}, &gen).requires_grad_(true), bias = randn({kC}, {}, &gen).requires_grad_(true);
  Tensor mean = zeros({kC}), var = ones({kC});
  Tensor gx = offset_leaf(x.detach(), s);
  Tensor gweight = offset_leaf(weight.detach(), s), gbias = offset_leaf(bias.detach(), s);
  Tensor gmean = offset_view(mean, s), gvar = offset_view(var, s);
  auto op = [&](const Tensor& t, const Tensor& m, const Tensor& v, const Tensor& w, const Tensor& b) {
    return relu ? batch_norm_relu(t, m, v, w, b) : batch_norm(t, m, v, w, b);
  };
  Tensor y = op(x, mean, var, weight, bias), gy = op(gx, gmean, gvar, gweight, gbias);
  CHECK_CLOSE(as_reference(gy), y, 1e-4, 1e-4);
  CHECK_CLOSE(as_reference(gmean), mean, 1e-4, 1e-5);
  CHECK_CLOSE(as_reference(gvar), var, 1e-4, 1e-5);
  Tensor dy = randn(x.sizes(), {}, &gen);
  if (relu) {
    Tensor again_mean = zeros({kC}), again_var = ones({kC});  // the same statistics as y's run
    batch_norm(x, again_mean, again_var, weight, bias).backward(through_gpu_relu(dy, gy));
  } else {
    y.backward(dy);
  }
  gy.backward(offset_view(dy, s));
  CHECK_CLOSE(as_reference(gx.grad()), x.grad(), 1e-3, 1e-4);
  CHECK_CLOSE(as_reference(gweight.grad()), weight.grad(), 1e-3, 1e-3);
  CHECK_CLOSE(as_reference(gbias.grad()), bias.grad(), 1e-3, 1e-3);
}

// conv2d, or the fused conv -> + bias -> relu block, forward and backward.
void conv_matches(const Setting& s, bool fused, Generator& gen) {
  CAPTURE(fused);
  const Conv2dOptions options{.padding = 1};
  auto op = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    return fused ? conv2d_bias_relu(x, w, b, options) : conv2d(x, w, b, options);
  };
  const int64_t n = 16;
  Tensor x = rounded(randn({n, kC, kH, kW}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor w = rounded(mul(randn({kK, kC, 3, 3}, {}, &gen), 0.2), s.dtype).requires_grad_(true);
  Tensor b = rounded(randn({kK}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor gx = offset_leaf(x.detach(), s), gw = offset_leaf(w.detach(), s), gb = offset_leaf(b.detach(), s);
  Tensor y = op(x, w, b), gy = op(gx, gw, gb);
  const double tol = tolerance(s.dtype);
  CHECK_CLOSE(as_reference(gy), y, tol, tol);
  Tensor dy = rounded(randn(y.sizes(), {}, &gen), s.dtype);
  if (fused) {
    conv2d(x, w, b, options).backward(through_gpu_relu(dy, gy));
  } else {
    y.backward(dy);
  }
  gy.backward(offset_view(dy, s));
  CHECK_CLOSE(as_reference(gx.grad()), x.grad(), tol, tol);
  CHECK_CLOSE(as_reference(gw.grad()), w.grad(), tol, 10 * tol);  // sums over N, P, Q
  CHECK_CLOSE(as_reference(gb.grad()), b.grad(), tol, 10 * tol);
}

// linear, or the fused linear -> + bias -> relu block, forward and backward.
void linear_matches(const Setting& s, bool fused, Generator& gen) {
  CAPTURE(fused);
  constexpr int64_t kM = 64, kIn = 32, kOut = 16;
  auto op = [&](const Tensor& x, const Tensor& w, const Tensor& b) {
    return fused ? linear_relu(x, w, b) : linear(x, w, b);
  };
  Tensor x = rounded(randn({kM, kIn}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor w = rounded(mul(randn({kOut, kIn}, {}, &gen), 0.2), s.dtype).requires_grad_(true);
  Tensor b = rounded(randn({kOut}, {}, &gen), s.dtype).requires_grad_(true);
  Tensor gx = offset_leaf(x.detach(), s), gw = offset_leaf(w.detach(), s), gb = offset_leaf(b.detach(), s);
  Tensor y = op(x, w, b), gy = op(gx, gw, gb);
  const double tol = tolerance(s.dtype);
  CHECK_CLOSE(as_reference(gy), y, tol, tol);
  Tensor dy = rounded(randn(y.sizes(), {}, &gen), s.dtype);
  if (fused) {
    linear(x, w, b).backward(through_gpu_relu(dy, gy));
  } else {
    y.backward(dy);
  }
  gy.backward(offset_view(dy, s));
  CHECK_CLOSE(as_reference(gx.grad()), x.grad(), tol, tol);
  CHECK_CLOSE(as_reference(gw.grad()), w.grad(), tol, 10 * tol);
  CHECK_CLOSE(as_reference(gb.grad()), b.grad(), tol, 10 * tol);
}

// Every setting in the order aligned, under-aligned, aligned: each key is met
// after its under-aligned neighbour and before it.
template <class Check>
void sweep(const char* op, Check check, bool bf16 = true) {
  Generator gen(53);
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    if (dtype == DType::BFloat16 && !bf16) continue;
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      for (int64_t offset : kOffsets) {
        CAPTURE(op);
        CAPTURE(dtype_name(dtype));
        CAPTURE(memory_format_name(format));
        CAPTURE(offset);
        check(Setting{dtype, format, offset}, gen);
      }
    }
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("public ops on offset views match the CPU in every layout and dtype") {
  sweep("relu", relu_matches);
  sweep("max_pool2d", [](const Setting& s, Generator& gen) { pool_matches(s, true, gen); });
  sweep("avg_pool2d", [](const Setting& s, Generator& gen) { pool_matches(s, false, gen); });
  sweep("batch_norm", [](const Setting& s, Generator& gen) { batch_norm_matches(s, false, gen); }, /*bf16=*/false);
  sweep("batch_norm_relu", [](const Setting& s, Generator& gen) { batch_norm_matches(s, true, gen); }, /*bf16=*/false);
  sweep("conv2d", [](const Setting& s, Generator& gen) { conv_matches(s, false, gen); });
  sweep("conv2d_bias_relu", [](const Setting& s, Generator& gen) { conv_matches(s, true, gen); });
  sweep("linear", [](const Setting& s, Generator& gen) { linear_matches(s, false, gen); });
  sweep("linear_relu", [](const Setting& s, Generator& gen) { linear_matches(s, true, gen); });
}

LOOM_GPU_TEST_CASE("the cuDNN layer: under-aligned graphs never reach an engine, conv runs on copies") {
  Generator gen(59);
  Tensor x = randn({kN, kC, kH, kW}, {}, &gen);
  const cudnn::PointwiseMode relu_mode{CUDNN_POINTWISE_RELU_FWD, {}};
  const kernel::Pool2dParams pool{2, 2, 2, 2, 0, 0, /*max=*/false, /*count_include_pad=*/true};
  Tensor pooled_ref = empty({kN, kC, kH / 2, kW / 2});
  cpu::avg_pool2d_forward(pooled_ref.strided(), x.strided(), pool);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (int64_t offset : {0, 1, 0, 3, 4, 2}) {  // one key aligned, under-aligned, aligned again
      CAPTURE(memory_format_name(format));
      CAPTURE(offset);
      const Setting s{DType::Float32, format, offset};
      Tensor gx = offset_view(x, s), gy = offset_view(zeros(x.sizes()), s);
      const bool aligned = cudnn::pointer_alignment(gx.strided().data) == cudnn::kFullAlignment;
      CHECK(cudnn::pointwise_forward(relu_mode, gy.strided(), gx.strided()) == aligned);
      if (aligned) CHECK_CLOSE(gy.cpu(), relu(x), 0, 0);

      Tensor py = offset_view(zeros(pooled_ref.sizes()), s);
      const bool pooled = cudnn::pool2d_forward(py.strided(), nullptr, gx.strided(), pool);
      if (!aligned) CHECK_FALSE(pooled);
      if (pooled) CHECK_CLOSE(py.cpu(), pooled_ref, 1e-5, 1e-6);
    }
  }
}

LOOM_GPU_TEST_CASE("cuDNN conv forward, dgrad and wgrad on offset views match the CPU") {
  Generator gen(61);
  const kernel::ConvParams p{1, 1, 1, 1, 1, 1, 1};
  const int64_t n = 16;
  Tensor x = randn({n, kC, kH, kW}, {}, &gen), w = mul(randn({kK, kC, 3, 3}, {}, &gen), 0.2);
  Tensor dy = randn({n, kK, kH, kW}, {}, &gen);
  Tensor y_ref = empty(dy.sizes()), dx_ref = empty(x.sizes()), dw_ref = empty(w.sizes());
  cpu::conv2d_forward(y_ref.strided(), x.strided(), w.strided(), nullptr, p);
  cpu::conv2d_dgrad(dx_ref.strided(), dy.strided(), w.strided(), p);
  cpu::conv2d_wgrad(dw_ref.strided(), dy.strided(), x.strided(), p);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (int64_t offset : {0, 1, 2, 3, 4, 0}) {
      CAPTURE(memory_format_name(format));
      CAPTURE(offset);
      const Setting s{DType::Float32, format, offset};
      Tensor gx = offset_view(x, s), gw = offset_view(w, s), gdy = offset_view(dy, s);
      Tensor gy = offset_view(zeros(dy.sizes()), s), gdx = offset_view(zeros(x.sizes()), s);
      Tensor gdw = offset_view(zeros(w.sizes()), s);
      cudnn::conv2d_forward(gy.strided(), gx.strided(), gw.strided(), p);
      cudnn::conv2d_dgrad(gdx.strided(), gdy.strided(), gw.strided(), p);
      cudnn::conv2d_wgrad(gdw.strided(), gdy.strided(), gx.strided(), p);
      CHECK_CLOSE(gy.cpu(), y_ref, 1e-2, 1e-2);
      CHECK_CLOSE(gdx.cpu(), dx_ref, 1e-2, 1e-2);
      CHECK_CLOSE(gdw.cpu(), dw_ref, 1e-2, 5e-2);
    }
  }
}
#endif  // LOOM_WITH_CUDA
