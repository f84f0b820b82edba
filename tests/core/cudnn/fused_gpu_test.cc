// File: tests/core/cudnn/fused_gpu_test.cc
// The fused cuDNN graphs called directly, against the CPU reference kernels, on
// NaN-poisoned outputs. A call that finds no engine must return false without
// throwing and leave its reason in the plan cache; the patterns the doc lists as
// supported on sm_90 (NHWC, tf32) must find one.
//
// N batch, C channels, H, W, K out channels, R, S filter; M rows, In, Out features.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu/conv.h"
#include "core/cpu/activation.h"
#include "core/cpu/norm.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/plan_cache.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

const MemoryFormat kNhwc = MemoryFormat::ChannelsLast;

Tensor on_gpu(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous) {
  return t.to(testing::test_gpu()).contiguous(format);
}

Tensor gpu_poisoned(const Shape& sizes, MemoryFormat format = MemoryFormat::Contiguous) {
  return full(sizes, NAN, {.device = testing::test_gpu(), .memory_format = format});
}

// CPU: t where mask > 0, else 0.
Tensor masked(const Tensor& t, const Tensor& mask) {
  Tensor out = empty_like(t);
  cpu::activation_backward(out.strided(), t.contiguous().strided(), mask.contiguous().strided(),
                           kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  return out;
}

Tensor cpu_relu(const Tensor& t) {
  Tensor out = empty_like(t);
  cpu::activation_forward(out.strided(), t.strided(), kernel::ActivationKind::Relu, kernel::act::Relu::info.default_parameters);
  return out;
}

void report_if_unsupported(bool ran) {
  if (!ran) MESSAGE("no engine (plan cache listing at the end)");
}

// Failures noted here are printed again by the last test case, after the plan
// cache listing, so they sit in the tail of the output.
std::vector<std::string>& failures() {
  static std::vector<std::string> list;
  return list;
}

void note(bool ok, const std::string& what) {
  CHECK_MESSAGE(ok, what);
  if (!ok) failures().push_back(what);
}

// CHECK_CLOSE's criterion (|a - e| <= atol + rtol |e|, no NaN) as a bool.
bool close_enough(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  std::vector<double> a = actual.contiguous().to_vector<double>();
  std::vector<double> e = expected.contiguous().to_vector<double>();
  if (a.size() != e.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]))) return false;
  }
  return true;
}

}  // namespace

LOOM_GPU_TEST_CASE("conv + bias + ReLU and dgrad + dReLU graphs match the CPU reference") {
  Generator gen(71);
  NumericsGuard tf32({.precision = Precision::Tf32});
  const kernel::ConvParams p{.pad_h = 1, .pad_w = 1};
  for (MemoryFormat format : {MemoryFormat::Contiguous, kNhwc}) {
    CAPTURE(memory_format_name(format));
    Tensor x = randn({2, 8, 7, 5}, {}, &gen), w = mul(randn({16, 8, 3, 3}, {}, &gen), 0.2);
    Tensor b = randn({16}, {}, &gen), dy = randn({2, 16, 7, 5}, {}, &gen);
    Tensor y_ref = empty({2, 16, 7, 5});
    Strided bs = b.strided();
    cpu::conv2d_forward(y_ref.strided(), x.strided(), w.strided(), &bs, p);
    y_ref = cpu_relu(y_ref);
    Tensor gy = gpu_poisoned({2, 16, 7, 5}, format);
    bool ran = cudnn::conv2d_bias_relu_forward(gy.strided(), on_gpu(x, format).strided(),
                                               on_gpu(w, format).strided(), on_gpu(b).strided(), p);
    report_if_unsupported(ran);
    CHECK(ran);
    if (ran) CHECK_CLOSE(gy.cpu(), y_ref, 5e-3, 5e-3);

    Tensor dx_ref = empty({2, 8, 7, 5});
    cpu::conv2d_dgrad(dx_ref.strided(), dy.strided(), w.strided(), p);
    dx_ref = masked(dx_ref, x);
    Tensor gdx = gpu_poisoned({2, 8, 7, 5}, format);
    ran = cudnn::conv2d_dgrad_relu(gdx.strided(), on_gpu(dy, format).strided(),
                                   on_gpu(w, format).strided(), on_gpu(x, format).strided(), p);
    report_if_unsupported(ran);
    if (format == kNhwc) CHECK(ran);  // the doc lists dgrad + dReLU for NHWC only
    if (ran) CHECK_CLOSE(gdx.cpu(), dx_ref, 5e-3, 5e-3);
  }
}

namespace {

// One BN + ReLU case: fp32 or bf16 x / z / y / dy (fp32 per-channel tensors),
// with or without residual. The CPU reference runs in fp32 on the
// bf16-rounded inputs. Failures are also noted for the summary at the end.
void check_bn_relu(DType dtype, bool with_residual, Generator& gen) {
  const double eps = 1e-5, momentum = 0.1;
  const Shape s = {4, 16, 5, 3};
  const int64_t c = s[1];
  const bool bf16 = dtype == DType::BFloat16;
  const double rtol = bf16 ? 2e-2 : 1e-3, atol = bf16 ? 2e-2 : 1e-4;
  const std::string what = fmt::format("bn_relu {} residual={}", dtype_name(dtype), with_residual);
  CAPTURE(what);
  auto rounded = [&](const Tensor& t) { return t.to(dtype).to(DType::Float32); };
  Tensor x = rounded(add(mul(randn(s, {}, &gen), 2.0), 0.5)), z = rounded(randn(s, {}, &gen));
  Tensor dy = rounded(randn(s, {}, &gen));
  Tensor w = add(rand({c}, {}, &gen), 0.5), b = randn({c}, {}, &gen);
  Tensor rm = randn({c}, {}, &gen), rv = add(rand({c}, {}, &gen), 0.5);

  // CPU reference: statistics, y = relu(bn(x) + z), then dpre = dy where y > 0 and dBN.
  Tensor mean_ref = empty({c}), invstd_ref = empty({c}), y_ref = empty(s);
  Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
  cpu::batch_norm_batch_stats(mean_ref.strided(), invstd_ref.strided(), x.strided(), eps,
                              kernel::RunningStats{rm_ref.strided(), rv_ref.strided(), momentum});
  cpu::batch_norm_forward(y_ref.strided(), x.strided(), mean_ref.strided(), invstd_ref.strided(),
                          w.strided(), b.strided());
  y_ref = cpu_relu(with_residual ? add(y_ref, z) : y_ref);
  Tensor dpre_ref = masked(dy, y_ref);
  Tensor dx_ref = empty(s), dw_ref = empty({c}), db_ref = empty({c});
  cpu::batch_norm_backward(dx_ref.strided(), dw_ref.strided(), db_ref.strided(), dpre_ref.strided(),
                           x.strided(), mean_ref.strided(), invstd_ref.strided(), w.strided(), true);

  auto dev = [&](const Tensor& t) { return on_gpu(t.to(dtype), kNhwc); };
  Tensor gx = dev(x), gz = dev(z), gw = on_gpu(w), gb = on_gpu(b);
  Tensor grm = on_gpu(rm), grv = on_gpu(rv);
  Tensor gy = dev(full(s, NAN)), gmean = gpu_poisoned({c}), ginvstd = gpu_poisoned({c});
  std::optional<Strided> residual;
  if (with_residual) residual = gz.strided();
  const bool ran = cudnn::batch_norm_activation_forward_training(
      {.y = gy.strided(), .save_mean = gmean.strided(), .save_invstd = ginvstd.strided(),
       .x = gx.strided(), .weight = gw.strided(), .bias = gb.strided(),
       .running_mean = grm.strided(), .running_var = grv.strided(), .eps = eps, .momentum = momentum},
      {}, residual);
  note(ran, what + ": fused forward ran");
  if (!ran) return;
  const double ftol = bf16 ? 2e-2 : 1e-4;
  note(close_enough(gy.to(DType::Float32).cpu(), y_ref, ftol, bf16 ? 2e-2 : 1e-5), what + ": y");
  note(close_enough(gmean.cpu(), mean_ref, 1e-4, 1e-5), what + ": mean");
  note(close_enough(ginvstd.cpu(), invstd_ref, 1e-4, 1e-5), what + ": invstd");
  note(close_enough(grm.cpu(), rm_ref, 1e-4, 1e-5), what + ": running_mean");
  note(close_enough(grv.cpu(), rv_ref, 1e-4, 1e-5), what + ": running_var");

  Tensor gdx = dev(full(s, NAN)), gdw = gpu_poisoned({c}), gdb = gpu_poisoned({c});
  Tensor gdz = dev(full(s, NAN));
  std::optional<Strided> dresidual;
  if (with_residual) dresidual = gdz.strided();
  bool bwd = cudnn::batch_norm_activation_backward(
      {.dx = gdx.strided(), .dweight = gdw.strided(), .dbias = gdb.strided(),
       .dresidual = dresidual, .dy = dev(dy).strided(), .x = gx.strided(),
       .y = gy.strided(), .weight = gw.strided(), .bias = gb.strided(),
       .save_mean = gmean.strided(), .save_invstd = ginvstd.strided(), .residual = residual});
  // With a residual no pattern has an engine in cuDNN 9.19 (the packed-bit
  // mask's DReluForkDNorm had one, and cost more than it saved): such a
  // backward runs unfused, which the op handles.
  if (!with_residual) note(bwd, what + ": fused backward ran");
  if (!bwd) return;
  note(close_enough(gdx.to(DType::Float32).cpu(), dx_ref, rtol, atol), what + ": dx");
  note(close_enough(gdw.cpu(), dw_ref, rtol, atol), what + ": dweight");
  note(close_enough(gdb.cpu(), db_ref, rtol, atol), what + ": dbias");
  if (with_residual) {
    note(close_enough(gdz.to(DType::Float32).cpu(), dpre_ref, rtol, bf16 ? 2e-2 : 1e-6),
         what + ": dresidual");
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("BN + (residual) + ReLU forward and dReLU + dBN backward match the CPU reference") {
  Generator gen(72);
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (bool with_residual : {false, true}) {
      check_bn_relu(dtype, with_residual, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("matmul + bias + ReLU: tf32 engine, none tried under strict fp32, no fp64") {
  Generator gen(73);
  Tensor x = randn({33, 40}, {}, &gen), w = mul(randn({24, 40}, {}, &gen), 0.2), b = randn({24}, {}, &gen);
  Tensor y_ref = relu(linear(x, w, b));
  Tensor gx = on_gpu(x), gw = on_gpu(w), gb = on_gpu(b), gy = gpu_poisoned({33, 24});
  {
    NumericsGuard strict({.precision = Precision::StrictFp32});
    CHECK_FALSE(cudnn::linear_bias_relu_forward(gy.strided(), gx.strided(), gw.strided(), gb.strided()));
  }
  NumericsGuard tf32({.precision = Precision::Tf32});
  bool ran = cudnn::linear_bias_relu_forward(gy.strided(), gx.strided(), gw.strided(), gb.strided());
  report_if_unsupported(ran);
  CHECK(ran);
  if (ran) CHECK_CLOSE(gy.cpu(), y_ref, 5e-3, 5e-3);
  Tensor gy64 = full({33, 24}, NAN, {.dtype = DType::Float64, .device = testing::test_gpu()});
  CHECK_FALSE(cudnn::linear_bias_relu_forward(gy64.strided(), on_gpu(x.to(DType::Float64)).strided(),
                                              on_gpu(w.to(DType::Float64)).strided(),
                                              on_gpu(b.to(DType::Float64)).strided()));
}

LOOM_GPU_TEST_CASE("zz summary: plan cache and the failures noted above") {
  MESSAGE("plan cache:\n" << cudnn::PlanCache::global().explain());
  std::string list;
  for (const std::string& f : failures()) list += "  FAILED " + f + "\n";
  MESSAGE(fmt::format("{} noted failure(s) in this file:\n{}", failures().size(), list));
  CHECK(failures().empty());
}

#endif  // LOOM_WITH_CUDA
