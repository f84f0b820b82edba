// File: tests/layers/attention_gpu_test.cc
// nn::TransformerEncoderLayer (and so nn::MultiheadAttention) on the GPU
// computes what its CPU twin with the same weights computes: the output and
// every parameter's gradient, with a causal mask and key padding, in strict
// fp32 and in float64, post- and pre-norm, batch first or not; and in TF32 and
// under bf16 autocast, within their rounding.
//
// L sequence length, N batch, E d_model.
#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Run {
  Tensor y;
  std::map<std::string, Tensor> grads;
};

Run step(nn::TransformerEncoderLayer& layer, const Tensor& x, const nn::EncoderCall& call, const Tensor& dy) {
  layer.zero_grad();
  Run r{.y = layer(x, call)};
  r.y.backward(dy);
  for (const auto& [name, p] : layer.named_parameters()) r.grads[name] = p.grad();
  return r;
}

void check_twins(bool norm_first, bool batch_first, DType dtype, bool autocast, double tol,
                 kernel::ActivationKind act = kernel::ActivationKind::Relu) {
  Generator gen(91);
  const nn::TransformerEncoderLayerOptions o{.dim_feedforward = 24, .dropout = 0.0, .activation = act,
                                             .batch_first = batch_first, .norm_first = norm_first};
  nn::TransformerEncoderLayerOptions drawn = o;
  drawn.generator = &gen;
  nn::TransformerEncoderLayer cpu(16, 4, drawn), gpu(16, 4, o);
  cpu.to(DType::Float64);
  gpu.to(DType::Float64);  // load_state_dict wants the dtypes equal
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(testing::test_gpu()).to(autocast ? DType::Float32 : dtype);
  const Shape shape = batch_first ? Shape{3, 7, 16} : Shape{7, 3, 16};
  const Tensor x = randn(shape, {.dtype = DType::Float64}, &gen), dy = randn(shape, {.dtype = DType::Float64}, &gen);
  const Tensor pad = tensor({0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, {3, 7},
                            {.dtype = DType::Bool});
  const nn::EncoderCall call{.src_key_padding_mask = pad, .is_causal = true};
  const Run want = step(cpu, x, call, dy);
  const nn::EncoderCall gpu_call{.src_key_padding_mask = pad.to(testing::test_gpu()), .is_causal = true};
  const DType in = autocast ? DType::Float32 : dtype;
  Run got;
  {
    std::optional<AutocastGuard> bf16;
    if (autocast) bf16.emplace(DType::BFloat16);
    got = step(gpu, x.to(in).to(testing::test_gpu()), gpu_call, dy.to(in).to(testing::test_gpu()));
  }
  CHECK(testing::normalized_error(got.y.cpu().to(DType::Float64), want.y) <= tol);
  for (const auto& [name, g] : want.grads) {
    CAPTURE(name);
    CHECK(testing::normalized_error(got.grads[name].cpu().to(DType::Float64), g) <= 4 * tol);
  }
}

LOOM_GPU_TEST_CASE("TransformerEncoderLayer on the GPU matches its CPU twin: causal, key padding, every layout") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (const bool norm_first : {false, true}) {
    for (const bool batch_first : {false, true}) {
      CAPTURE(norm_first);
      CAPTURE(batch_first);
      check_twins(norm_first, batch_first, DType::Float64, false, 1e-12);
      check_twins(norm_first, batch_first, DType::Float32, false, 1e-5);
    }
  }
}

// Rounded runs use GELU: under ReLU a feed-forward pre-activation within the
// rounding of zero takes the other branch, and its whole term moves linear1's
// gradients (and, pre-norm, norm2's) by far more than the rounding (a bf16 run
// on an H100: 0.18-0.29 of their largest element).
LOOM_GPU_TEST_CASE("TransformerEncoderLayer in TF32 on the GPU stays within TF32's rounding") {
  NumericsGuard tf32({.precision = Precision::Tf32});
  check_twins(false, true, DType::Float32, false, 5e-3, kernel::ActivationKind::Gelu);
  check_twins(true, false, DType::Float32, false, 5e-3, kernel::ActivationKind::Gelu);
}

LOOM_GPU_TEST_CASE("TransformerEncoderLayer under bf16 autocast on the GPU stays within bf16's rounding") {
  check_twins(false, true, DType::Float32, true, 3e-2, kernel::ActivationKind::Gelu);
  check_twins(true, false, DType::Float32, true, 3e-2, kernel::ActivationKind::Gelu);
}

}  // namespace
}  // namespace loom
