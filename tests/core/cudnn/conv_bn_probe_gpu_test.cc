// File: tests/core/cudnn/conv_bn_probe_gpu_test.cc
// Which convolution-batch-norm fusion graphs this GPU's cuDNN runs: for each
// pattern (the pieces of cuDNN's ConvBNfprop / ConvBNwgrad /
// DgradDreluBNBwdWeight fusions, and plain controls), each data type (fp16,
// bf16, fp32) and layout, every engine config the heuristics offer is
// finalized and test-executed on scratch buffers (cudnn::all_working_plans).
// Prints one line per graph ("PROBE ..."): how many configs work, their
// engines, and whether they compile at run time; docs/gpu_and_precision.md
// keeps the table. The test requires only the controls (plain conv forward,
// dgrad + dReLU in NHWC) to run: what else runs is what the probe finds out.
//
// N batch, C in channels, K out channels, H, W, 3x3 convolutions, padding 1.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/cpu/conv.h"
#include "core/cuda/runtime.h"
#include "core/cudnn/context.h"
#include "core/cudnn/graph.h"
#include "core/cudnn/plan.h"
#include "core/device.h"
#include "core/error.h"
#include "tests/testing.h"

namespace loom::cudnn {
namespace {

struct Geometry {
  int64_t n, c, k, h, w;
};

struct Probe {
  Geometry g;
  cudnnDataType_t data;  // x, w, y and every real activation
  bool nhwc;
  cudnnDataType_t affine;  // scale / bias / eq_* (real per-channel tensors)
  Graph graph;
  int64_t next_uid = 1;

  int64_t add(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t dtype, bool virt) {
    const int64_t uid = next_uid++;
    graph.add_tensor({.uid = uid, .dims = std::move(dims), .strides = std::move(strides), .dtype = dtype,
                      .is_virtual = virt});
    return uid;
  }
  // (N, channels, H, W) in the probe's layout.
  int64_t activation(int64_t channels, bool virt = false) {
    const auto [n, c, k, h, w] = g;
    (void)c, (void)k;
    std::vector<int64_t> strides = nhwc ? std::vector<int64_t>{h * w * channels, 1, w * channels, channels}
                                        : std::vector<int64_t>{channels * h * w, h * w, w, 1};
    return add({n, channels, h, w}, strides, virt ? CUDNN_DATA_FLOAT : data, virt);
  }
  int64_t filter() {
    const auto [n, c, k, h, w] = g;
    (void)n, (void)h, (void)w;
    std::vector<int64_t> strides = nhwc ? std::vector<int64_t>{9 * c, 1, 3 * c, c}
                                        : std::vector<int64_t>{9 * c, 9, 3, 1};
    return add({k, c, 3, 3}, strides, data, false);
  }
  int64_t channel(int64_t channels, cudnnDataType_t dtype) {
    return add({1, channels, 1, 1}, {channels, 1, channels, channels}, dtype, false);
  }
  // A host scalar passed by value through the variant pack (as cudnn-frontend's
  // samples pass BN finalize's epsilon, momentum and accumulation count).
  int64_t scalar(cudnnDataType_t dtype, double value) {
    const int64_t uid = next_uid++;
    graph.add_tensor({.uid = uid, .dims = {1, 1, 1, 1}, .strides = {1, 1, 1, 1}, .dtype = dtype,
                      .by_value = true, .scalar_for_testing = value});
    return uid;
  }
  kernel::ConvParams conv() const {
    return {.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dilation_h = 1, .dilation_w = 1};
  }
  // relu(x * scale + bias) into a virtual tensor: the next conv's prologue.
  int64_t scale_bias_relu(int64_t x, int64_t channels) {
    const int64_t scale = channel(channels, affine), bias = channel(channels, affine);
    const int64_t scaled = activation(channels, true), shifted = activation(channels, true);
    const int64_t out = activation(channels, true);
    graph.pointwise(CUDNN_POINTWISE_MUL, x, scale, scaled);
    graph.pointwise(CUDNN_POINTWISE_ADD, scaled, bias, shifted);
    graph.pointwise(CUDNN_POINTWISE_RELU_FWD, shifted, std::nullopt, out);
    return out;
  }
};

using Builder = std::function<void(Probe&)>;

void conv_fprop(Probe& p) {
  const int64_t x = p.activation(p.g.c), w = p.filter(), y = p.activation(p.g.k);
  p.graph.conv(ConvDirection::Forward, x, w, y, p.conv(), CUDNN_DATA_FLOAT);
}

void conv_genstats(Probe& p) {
  const int64_t x = p.activation(p.g.c), w = p.filter(), y = p.activation(p.g.k);
  p.graph.conv(ConvDirection::Forward, x, w, y, p.conv(), CUDNN_DATA_FLOAT);
  p.graph.gen_stats(y, p.channel(p.g.k, CUDNN_DATA_FLOAT), p.channel(p.g.k, CUDNN_DATA_FLOAT));
}

void scale_bias_relu_conv_genstats(Probe& p) {
  const int64_t x = p.activation(p.g.c), w = p.filter(), y = p.activation(p.g.k);
  p.graph.conv(ConvDirection::Forward, p.scale_bias_relu(x, p.g.c), w, y, p.conv(), CUDNN_DATA_FLOAT);
  p.graph.gen_stats(y, p.channel(p.g.k, CUDNN_DATA_FLOAT), p.channel(p.g.k, CUDNN_DATA_FLOAT));
}

void scale_bias_relu_conv(Probe& p) {
  const int64_t x = p.activation(p.g.c), w = p.filter(), y = p.activation(p.g.k);
  p.graph.conv(ConvDirection::Forward, p.scale_bias_relu(x, p.g.c), w, y, p.conv(), CUDNN_DATA_FLOAT);
}

void bn_finalize(Probe& p) {
  const int64_t k = p.g.k;
  auto f = [&] { return p.channel(k, CUDNN_DATA_FLOAT); };
  Graph::BnFinalize u{.sum = f(), .sqsum = f(), .scale = f(), .bias = f(), .prev_running_mean = f(),
                      .prev_running_var = f(), .epsilon = p.scalar(CUDNN_DATA_FLOAT, 1e-5),
                      .momentum = p.scalar(CUDNN_DATA_FLOAT, 0.1),
                      .accum_count = p.scalar(CUDNN_DATA_INT64, double(p.g.n * p.g.h * p.g.w)),
                      .eq_scale = f(), .eq_bias = f(), .saved_mean = f(),
                      .saved_inv_std = f(), .running_mean = f(), .running_var = f()};
  p.graph.bn_finalize(u);
}

// dgrad, then dReLU against the recomputed norm output, then the norm's weight
// gradients. The recomputation reads the very mean, inverse std and scale tensors
// the weight-gradient op reads ((x + mean) * inv_std * scale + bias, the mean
// passed negated), which is the structure cudnn-frontend's dgrad-dReLU-dBN
// sample builds and the fused engine matches.
void dgrad_drelu_bn_bwd_weights(Probe& p) {
  const int64_t c = p.g.c;
  const int64_t dy = p.activation(p.g.k), w = p.filter(), dconv = p.activation(c, true);
  p.graph.conv(ConvDirection::BackwardData, dconv, w, dy, p.conv(), CUDNN_DATA_FLOAT);
  const int64_t x = p.activation(c);  // the norm's input, saved by the forward
  auto f = [&] { return p.channel(c, CUDNN_DATA_FLOAT); };
  const int64_t mean = f(), inv_std = f(), scale = f(), bias = f();
  const int64_t centred = p.activation(c, true), normed = p.activation(c, true);
  const int64_t scaled = p.activation(c, true), shifted = p.activation(c, true), drelu = p.activation(c);
  p.graph.pointwise(CUDNN_POINTWISE_ADD, x, mean, centred);
  p.graph.pointwise(CUDNN_POINTWISE_MUL, centred, inv_std, normed);
  p.graph.pointwise(CUDNN_POINTWISE_MUL, normed, scale, scaled);
  p.graph.pointwise(CUDNN_POINTWISE_ADD, scaled, bias, shifted);
  p.graph.pointwise_backward(CUDNN_POINTWISE_RELU_BWD, dconv, shifted, drelu);
  p.graph.bn_backward_weights({.x = x, .dy = drelu, .mean = mean, .inv_std = inv_std, .scale = scale,
                               .dscale = f(), .dbias = f(), .eq_dy_scale = f(), .eq_x_scale = f(), .eq_bias = f()});
}

void dgrad_drelu(Probe& p) {
  const int64_t c = p.g.c;
  const int64_t dy = p.activation(p.g.k), w = p.filter(), dconv = p.activation(c, true);
  p.graph.conv(ConvDirection::BackwardData, dconv, w, dy, p.conv(), CUDNN_DATA_FLOAT);
  const int64_t x = p.activation(c), dx = p.activation(c);
  p.graph.pointwise_backward(CUDNN_POINTWISE_RELU_BWD, dconv, x, dx);
}

void scale_bias_relu_wgrad(Probe& p) {
  const int64_t x = p.activation(p.g.c), dy = p.activation(p.g.k), dw = p.filter();
  p.graph.conv(ConvDirection::BackwardFilter, p.scale_bias_relu(x, p.g.c), dw, dy, p.conv(), CUDNN_DATA_FLOAT);
}

// The norm's dx from BnBackwardWeights' coefficients: one pointwise graph.
void bn_dx_apply(Probe& p) {
  const int64_t c = p.g.c;
  const int64_t dy = p.activation(c), x = p.activation(c), dx = p.activation(c);
  const int64_t a = p.channel(c, CUDNN_DATA_FLOAT), b = p.channel(c, CUDNN_DATA_FLOAT);
  const int64_t bias = p.channel(c, CUDNN_DATA_FLOAT);
  const int64_t t1 = p.activation(c, true), t2 = p.activation(c, true), t3 = p.activation(c, true);
  p.graph.pointwise(CUDNN_POINTWISE_MUL, dy, a, t1);
  p.graph.pointwise(CUDNN_POINTWISE_MUL, x, b, t2);
  p.graph.pointwise(CUDNN_POINTWISE_ADD, t1, t2, t3);
  p.graph.pointwise(CUDNN_POINTWISE_ADD, t3, bias, dx);
}

const char* dtype_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_HALF: return "fp16";
    case CUDNN_DATA_BFLOAT16: return "bf16";
    case CUDNN_DATA_FLOAT: return "fp32";
    default: return "?";
  }
}

// The number of working configs (printed with the engines).
size_t probe(const char* name, const Builder& build, Geometry g, cudnnDataType_t data, bool nhwc,
             cudnnDataType_t affine) {
  Probe p{.g = g, .data = data, .nhwc = nhwc, .affine = affine};
  std::string result;
  size_t working = 0;
  try {
    build(p);
    std::vector<std::unique_ptr<Plan>> plans = all_working_plans(p.graph, handle());
    working = plans.size();
    std::vector<std::string> engines;
    bool runtime = false;
    for (const auto& plan : plans) {
      engines.push_back(std::to_string(plan->notes().engine_id));
      runtime = runtime || compiles_at_run_time(plan->notes());
    }
    result = plans.empty() ? "NO working config"
                           : fmt::format("{} working, engines [{}]{}", plans.size(), fmt::join(engines, ","),
                                         runtime ? ", some compiled at run time" : "");
  } catch (const Error& e) {
    result = fmt::format("REFUSED: {}", std::string(e.what()).substr(0, 160));
  }
  std::printf("PROBE %-34s %-4s %-4s affine %-4s N%lld C%lld K%lld %lldx%lld | %s\n", name, dtype_name(data),
              nhwc ? "nhwc" : "nchw", dtype_name(affine), static_cast<long long>(g.n), static_cast<long long>(g.c),
              static_cast<long long>(g.k), static_cast<long long>(g.h), static_cast<long long>(g.w), result.c_str());
  std::fflush(stdout);
  return working;
}

TEST_CASE("conv-bn fusion probe: which graphs cuDNN runs, per data type and layout") {
  if (!testing::test_gpu_available()) return;
  DeviceGuard device(testing::test_gpu());
  const std::pair<const char*, Builder> patterns[] = {
      {"conv_fprop (control)", conv_fprop},
      {"conv_fprop+genstats", conv_genstats},
      {"scale_bias_relu+conv_fprop", scale_bias_relu_conv},
      {"scale_bias_relu+conv_fprop+genstats", scale_bias_relu_conv_genstats},
      {"bn_finalize", bn_finalize},
      {"dgrad+drelu (control)", dgrad_drelu},
      {"dgrad+drelu(bn recomputed)+bn_bwd_w", dgrad_drelu_bn_bwd_weights},
      {"scale_bias_relu+wgrad", scale_bias_relu_wgrad},
      {"bn_dx_apply (pointwise)", bn_dx_apply},
  };
  const Geometry shapes[] = {{32, 64, 64, 32, 32}, {128, 128, 128, 16, 16}};
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, testing::test_gpu().index));
  std::printf("conv-bn probe on %s (sm_%d%d), cuDNN %zu\n", prop.name, prop.major, prop.minor, loaded_version());
  for (const Geometry& g : shapes) {
    for (const auto& [name, build] : patterns) {
      const bool control = std::string(name).find("(control)") != std::string::npos;
      const bool has_affine = std::string(name).find("scale_bias") != std::string::npos ||
                              std::string(name).find("bn_") != std::string::npos;
      for (cudnnDataType_t data : {CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT}) {
        for (bool nhwc : {true, false}) {
          if (!nhwc && g.n != 32) continue;  // NCHW once, at the small shape
          const size_t working = probe(name, build, g, data, nhwc, data);
          if (control && nhwc) CHECK_MESSAGE(working > 0, name << " " << dtype_name(data));
          if (has_affine && data != CUDNN_DATA_FLOAT && nhwc) probe(name, build, g, data, nhwc, CUDNN_DATA_FLOAT);
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::cudnn
#endif  // LOOM_WITH_CUDA
