// File: tests/core/ops/bf16_gpu_test.cc
// bfloat16 on the GPU: every op that takes bf16 tensors, forward and backward,
// against the CPU float32 reference fed the same bf16-rounded inputs (so only
// the GPU's own rounding differs), in NCHW and channels-last; the casts and
// the bf16 + fp32 promotion; and autocast, down to a small conv-bn-relu-pool-
// linear net that trains under AutocastGuard with fp32 parameters and grads.
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). bf16 keeps 8
// significant bits, so one rounding of a result is up to 2^-9 ~ 2e-3 relative;
// tolerances below allow a few roundings (elementwise) or a rounded result of
// an fp32 accumulation (reductions, conv, matmul, batch norm).
//
// N batch, C channels, H, W, K out channels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Tolerance {
  double fwd, bwd;
};

constexpr Tolerance kExact{0.0, 0.0};     // selections and copies: no arithmetic
constexpr Tolerance kRounded{8e-3, 8e-3};  // one fp32 formula, rounded once to bf16
constexpr Tolerance kChained{2e-2, 2e-2};  // several rounded ops, or rounded dy feeding sums
constexpr Tolerance kSummed{1e-2, 2e-2};   // fp32 accumulation, rounded result
constexpr Tolerance kGemm{2e-2, 3e-2};     // conv / matmul / batch norm on bf16 tensors
// Max pooling selects exactly; with overlapping windows (stride < kernel) its
// backward adds several bf16 gradients into one input, rounded once each.
constexpr Tolerance kSelectedSums{0.0, 8e-3};

constexpr MemoryFormat kLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};

double normalized_error(const Tensor& actual, const Tensor& expected) {
  std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    double e = std::fabs(a[i] - b[i]);
    if (std::isnan(e)) return INFINITY;
    worst = std::max(worst, e);
  }
  return worst / scale;
}

// An fp32 CPU tensor holding bf16-representable values: what both sides see.
Tensor rounded(const Tensor& t) { return t.detach().to(DType::BFloat16).to(DType::Float32); }

Tensor leaf(const Shape& sizes, Generator& gen, double scale = 1.0, double shift = 0.0) {
  return rounded(add(mul(randn(sizes, {}, &gen), scale), shift)).requires_grad_(true);
}

// (N, C, H, W) with distinct values in each plane (H * W <= 101), all exact in
// bf16: pooling has no ties, so every backend routes gradients alike.
Tensor distinct_planes(const Shape& sizes) {
  const int64_t plane = sizes[2] * sizes[3];
  std::vector<double> v(numel_of(sizes));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i) % plane, c = static_cast<int64_t>(i) / plane;
    v[i] = static_cast<double>((k * 37 + c * 11) % 101 - 50) / 8.0;
  }
  return tensor(v, sizes).requires_grad_(true);
}

// How the GPU side of a check receives each input and what it returns.
struct GpuSide {
  std::vector<bool> fp32_inputs = {};   // inputs passed as fp32 (default: all bf16)
  DType output = DType::BFloat16;       // the dtype the GPU op must return
  MemoryFormat format = MemoryFormat::Contiguous;
};

Tensor to_gpu(const Tensor& t, bool fp32, MemoryFormat format) {
  Tensor g = t.detach().to(testing::test_gpu());
  if (!fp32 && is_floating(t.dtype())) g = g.to(DType::BFloat16);
  if (t.dim() == 4 && is_floating(t.dtype())) g = g.contiguous(format);
  return t.requires_grad() ? g.requires_grad_(true) : g;
}

// Runs `op` on fp32 CPU leaves and on GPU leaves (bf16 unless kept fp32),
// backpropagates the same bf16-rounded gradient through both, and checks the
// output, its dtype, each input gradient and each gradient's dtype.
void check_bf16(const std::string& name, const OpFn& op, const std::vector<Tensor>& inputs,
                const GpuSide& side, Tolerance tol, Generator& gen) {
  CAPTURE(name);
  CAPTURE(memory_format_name(side.format));
  std::vector<Tensor> cpu_in, gpu_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor c = inputs[i].detach().clone();
    cpu_in.push_back(inputs[i].requires_grad() ? c.requires_grad_(true) : c);
    const bool fp32 = i < side.fp32_inputs.size() && side.fp32_inputs[i];
    gpu_in.push_back(to_gpu(inputs[i], fp32, side.format));
  }
  Tensor cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  REQUIRE(gpu_out.device().is_cuda());
  CHECK(gpu_out.dtype() == side.output);
  double fwd = normalized_error(gpu_out, cpu_out), bwd = 0;
  if (cpu_out.requires_grad()) {
    Tensor g = rounded(randn(cpu_out.sizes(), {}, &gen));
    cpu_out.backward(g);
    gpu_out.backward(g.to(testing::test_gpu()).to(gpu_out.dtype()));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      if (!cpu_in[i].requires_grad()) continue;
      REQUIRE(gpu_in[i].grad().defined());
      CHECK(gpu_in[i].grad().dtype() == gpu_in[i].dtype());
      bwd = std::max(bwd, normalized_error(gpu_in[i].grad(), cpu_in[i].grad()));
    }
  }
  std::printf("BF16 %-30s %-13s fwd=%.2e bwd=%.2e\n", name.c_str(),
              std::string(memory_format_name(side.format)).c_str(), fwd, bwd);
  CHECK(fwd <= tol.fwd);
  CHECK(bwd <= tol.bwd);
}

GpuSide in_layout(MemoryFormat format) { return {.format = format}; }

// A loss computed from a 16-bit input, and its 16-bit leaf.
struct LossRun {
  Tensor loss, input;
};

// `direct` took its 16-bit input as it is and `cast` took the same values cast
// to fp32 first: the loss is fp32 and equal, and so (in the input's dtype) is
// the gradient of the same dy.
void check_same_as_cast(const LossRun& direct, const LossRun& cast, Generator& gen) {
  CHECK(direct.loss.dtype() == DType::Float32);
  CHECK_CLOSE(direct.loss.cpu(), cast.loss.cpu(), 0.0, 0.0);
  const Tensor dy = randn(direct.loss.sizes(), {}, &gen).to(testing::test_gpu());
  direct.loss.backward(dy);
  cast.loss.backward(dy);
  REQUIRE(direct.input.grad().defined());
  CHECK(direct.input.grad().dtype() == direct.input.dtype());
  CHECK_CLOSE(direct.input.grad().to(DType::Float32).cpu(), cast.input.grad().to(DType::Float32).cpu(), 0.0, 0.0);
}

}  // namespace

LOOM_GPU_TEST_CASE("bf16: elementwise ops and activations match the fp32 CPU reference") {
  Generator gen(61);
  for (MemoryFormat f : kLayouts) {
    const GpuSide side = in_layout(f);
    Tensor a = leaf({2, 3, 4, 5}, gen), b = leaf({2, 3, 4, 5}, gen), bc = leaf({3, 1, 1}, gen);
    Tensor pos = leaf({2, 3, 4, 5}, gen, 0.5, 3.0);
    check_bf16("add", [](auto& in) { return add(in[0], in[1], 0.5); }, {a, b}, side, kChained, gen);
    check_bf16("sub(broadcast)", [](auto& in) { return sub(in[0], in[1]); }, {a, bc}, side, kChained, gen);
    check_bf16("mul(broadcast)", [](auto& in) { return mul(in[0], in[1]); }, {a, bc}, side, kChained, gen);
    check_bf16("div", [](auto& in) { return div(in[0], in[1]); }, {a, pos}, side, kChained, gen);
    check_bf16("scalar ops", [](auto& in) { return 2.0 - in[0] * 3.0 + 1.0 / in[1]; }, {a, pos}, side, kChained, gen);
    check_bf16("neg", [](auto& in) { return neg(in[0]); }, {a}, side, kExact, gen);
    check_bf16("exp", [](auto& in) { return exp(in[0]); }, {a}, side, kChained, gen);
    check_bf16("log", [](auto& in) { return log(in[0]); }, {pos}, side, kChained, gen);
    check_bf16("sqrt", [](auto& in) { return sqrt(in[0]); }, {pos}, side, kChained, gen);
    check_bf16("clamp", [](auto& in) { return clamp(in[0], -0.5, 0.75); }, {a}, side, kExact, gen);
    check_bf16("relu", [](auto& in) { return relu(in[0]); }, {a}, side, kExact, gen);
    check_bf16("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {a}, side, kChained, gen);
    check_bf16("tanh", [](auto& in) { return tanh(in[0]); }, {a}, side, kChained, gen);
    check_bf16("gelu", [](auto& in) { return gelu(in[0]); }, {a}, side, kChained, gen);
    check_bf16("silu", [](auto& in) { return silu(in[0]); }, {a}, side, kChained, gen);
    check_bf16("relu(transposed view)", [](auto& in) { return relu(in[0].transpose(1, 3)); }, {a}, side, kExact, gen);
    check_bf16("mul(sliced views)", [](auto& in) {
      return mul(in[0].slice(3, 0, 5, 2), in[1].slice(3, 1, 4));
    }, {a, b}, side, kChained, gen);
    Tensor big = leaf({8, 64, 4, 4}, gen);  // 8192 elements: the cuDNN pointwise path
    check_bf16("relu(cudnn graph)", [](auto& in) { return relu(in[0]); }, {big}, side, kExact, gen);
  }
  Tensor odd = leaf({1000003}, gen), one = leaf({1}, gen), none = leaf({0, 3}, gen);
  for (const Tensor& t : {odd, one, none}) {
    check_bf16("gelu " + shape_str(t.sizes()), [](auto& in) { return gelu(in[0]); }, {t}, {}, kChained, gen);
  }
}

LOOM_GPU_TEST_CASE("bf16: reductions accumulate in fp32 and match the CPU") {
  Generator gen(62);
  for (MemoryFormat f : kLayouts) {
    const GpuSide side = in_layout(f);
    Tensor x = leaf({4, 6, 5, 7}, gen);
    check_bf16("sum", [](auto& in) { return sum(in[0]); }, {x}, side, kSummed, gen);
    check_bf16("sum(dims 0,2,3)", [](auto& in) { return sum(in[0], {0, 2, 3}); }, {x}, side, kSummed, gen);
    check_bf16("mean(dim 1, keepdim)", [](auto& in) { return mean(in[0], {1}, true); }, {x}, side, kSummed, gen);
    check_bf16("max", [](auto& in) { return max(in[0]); }, {x}, side, kExact, gen);
    check_bf16("max(dim 3)", [](auto& in) { return max(in[0], 3).values; }, {x}, side, kExact, gen);
  }
  // 4096 ones: a bf16 running sum would stall at 256; the fp32 accumulator gives 4096 exactly.
  Tensor ones_gpu = ones({64, 64}, {.device = testing::test_gpu()}).to(DType::BFloat16);
  CHECK(sum(ones_gpu).item() == 4096.0);
  CHECK(sum(ones_gpu, {0}).to_vector<double>() == std::vector<double>(64, 64.0));
}

LOOM_GPU_TEST_CASE("bf16: conv2d, linear and matmul on bf16 tensors match the CPU") {
  Generator gen(63);
  struct ConvCase {
    Shape x, w;
    Conv2dOptions o;
  };
  const ConvCase cases[] = {
      {{4, 8, 12, 12}, {16, 8, 3, 3}, {.padding = {1, 1}}},
      {{2, 8, 9, 9}, {16, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {{2, 3, 10, 10}, {8, 3, 3, 3}, {.padding = {1, 1}}},
  };
  for (MemoryFormat f : kLayouts) {
    for (const ConvCase& c : cases) {
      Tensor x = leaf(c.x, gen), w = leaf(c.w, gen, 0.3), b = leaf({c.w[0]}, gen);
      check_bf16("conv2d(bias) " + shape_str(c.x),
                 [&](auto& in) { return conv2d(in[0], in[1], in[2], c.o); }, {x, w, b},
                 in_layout(f), kGemm, gen);
    }
  }
  Tensor x = leaf({16, 400}, gen), w = leaf({120, 400}, gen, 0.05), b = leaf({120}, gen);
  check_bf16("linear", [](auto& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}, {}, kGemm, gen);
  Tensor p = leaf({3, 5, 7}, gen), q = leaf({7, 4}, gen);
  check_bf16("matmul(batched, broadcast)", [](auto& in) { return matmul(in[0], in[1]); }, {p, q}, {}, kGemm, gen);
  check_bf16("matmul(transposed)", [](auto& in) { return matmul(in[0].t(), in[1]); },
             {leaf({9, 6}, gen), leaf({9, 5}, gen)}, {}, kGemm, gen);
}

LOOM_GPU_TEST_CASE("bf16: batch norm with fp32 parameters, pooling, softmax, cat, views") {
  Generator gen(64);
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({4, 8, 6, 6}, gen, 2.0, 0.5), w = leaf({8}, gen, 0.2, 1.0), b = leaf({8}, gen);
    GpuSide bn_side{.fp32_inputs = {false, true, true}, .format = f};
    for (bool training : {true, false}) {
      check_bf16(training ? "batch_norm(train)" : "batch_norm(eval)", [training](auto& in) {
        Tensor rm = zeros({8}, {.device = in[0].device()}), rv = ones({8}, {.device = in[0].device()});
        Tensor y = batch_norm(in[0], rm, rv, in[1], in[2], {.training = training});
        CHECK(rm.dtype() == DType::Float32);
        return y;
      }, {x, w, b}, bn_side, kGemm, gen);
    }
    const GpuSide side = in_layout(f);
    Tensor y = distinct_planes({2, 4, 9, 9});
    for (const Pool2dOptions& o : {Pool2dOptions{.kernel_size = {2, 2}},
                                   Pool2dOptions{.kernel_size = {3, 3}, .stride = std::array<int64_t, 2>{2, 2}, .padding = {1, 1}},
                                   Pool2dOptions{.kernel_size = {2, 2}, .ceil_mode = true}}) {
      check_bf16("max_pool2d", [o](auto& in) { return max_pool2d(in[0], o); }, {y}, side, kSelectedSums, gen);
      check_bf16("max_pool2d_with_indices", [o](auto& in) { return max_pool2d_with_indices(in[0], o).values; }, {y}, side, kSelectedSums, gen);
      check_bf16("avg_pool2d", [o](auto& in) { return avg_pool2d(in[0], o); }, {y}, side, kRounded, gen);
    }
    check_bf16("global_max_pool2d", [](auto& in) { return global_max_pool2d(in[0]); }, {y}, side, kExact, gen);
    check_bf16("global_avg_pool2d", [](auto& in) { return global_avg_pool2d(in[0]); }, {y}, side, kRounded, gen);
    Tensor s = leaf({4, 10, 3, 3}, gen, 2.0);
    check_bf16("softmax(dim 1)", [](auto& in) { return softmax(in[0], 1); }, {s}, side, kChained, gen);
    check_bf16("log_softmax(dim 1)", [](auto& in) { return log_softmax(in[0], 1); }, {s}, side, kChained, gen);
    check_bf16("flatten", [](auto& in) { return in[0].flatten(1); }, {s}, side, kExact, gen);
    check_bf16("contiguous", [](auto& in) { return in[0].contiguous(); }, {s}, side, kExact, gen);
    check_bf16("cat(dim 1)", [](auto& in) { return cat({in[0], relu(in[1])}, 1); }, {s, s}, side, kExact, gen);
  }
  Tensor d = leaf({64, 33}, gen);
  check_bf16("dropout(p = 0.5: mask 0 or 2, exact in bf16)", [](auto& in) {
    Generator local(7);
    return dropout(in[0], 0.5, /*training=*/true, &local);
  }, {d}, {}, kExact, gen);
}

LOOM_GPU_TEST_CASE("bf16: casts on the GPU round like the CPU and are differentiable") {
  Generator gen(65);
  Tensor x = randn({3, 1000}, {}, &gen).requires_grad_(true);
  Tensor xg = x.detach().to(testing::test_gpu()).requires_grad_(true);
  Tensor half = xg.to(DType::BFloat16);
  CHECK(half.dtype() == DType::BFloat16);
  CHECK_CLOSE(half.to(DType::Float32).cpu(), x.detach().to(DType::BFloat16).to(DType::Float32), 0.0, 0.0);
  Tensor g = randn({3, 1000}, {}, &gen);
  mul(half, 2.0).backward(g.to(testing::test_gpu()).to(DType::BFloat16));
  REQUIRE(xg.grad().defined());
  CHECK(xg.grad().dtype() == DType::Float32);  // the cast's backward: back to the input dtype
  CHECK_CLOSE(xg.grad().cpu(), rounded(mul(rounded(g), 2.0)), 0.0, 0.0);
  Tensor cl = rounded(randn({2, 8, 5, 5}, {}, &gen)).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  CHECK(cl.to(DType::BFloat16).suggest_memory_format() == MemoryFormat::ChannelsLast);
}

// cross_entropy reads 16-bit logits in its kernels: the loss, the per-position
// losses and the gradient must be bit for bit those of casting to fp32 first.
LOOM_GPU_TEST_CASE("bf16/fp16: cross_entropy on 16-bit logits equals casting them to fp32 first") {
  Generator gen(67);
  struct Case {
    Shape logits;
    MemoryFormat format;
  };
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (const Case& c : {Case{{33, 10}, MemoryFormat::Contiguous}, Case{{6, 70}, MemoryFormat::Contiguous},
                          Case{{2, 5, 3, 4}, MemoryFormat::Contiguous}, Case{{2, 5, 3, 4}, MemoryFormat::ChannelsLast}}) {
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        for (double smoothing : {0.0, 0.2}) {
          CAPTURE(dtype_name(dtype));
          CAPTURE(shape_str(c.logits));
          CAPTURE(static_cast<int>(r));
          CAPTURE(smoothing);
          Shape target_sizes = c.logits;
          target_sizes.erase(target_sizes.begin() + 1);
          const Tensor target = randint(0, c.logits[1], target_sizes, {.dtype = DType::Int64}, &gen)
                                    .to(testing::test_gpu());
          const Tensor base = (randn(c.logits, {}, &gen) * 3.0).to(testing::test_gpu()).to(dtype).contiguous(c.format);
          const CrossEntropyOptions options{.reduction = r, .ignore_index = 1, .label_smoothing = smoothing};
          Tensor direct_in = base.detach().requires_grad_(true);
          Tensor cast_in = base.detach().requires_grad_(true);
          const Tensor direct = cross_entropy(direct_in, target, options);
          const Tensor cast = cross_entropy(cast_in.to(DType::Float32), target, options);
          check_same_as_cast({direct, direct_in}, {cast, cast_in}, gen);
        }
      }
    }
  }
}

// With class probabilities (a target of the logits' shape, here 16-bit too) and
// for one sample's logits (C), cross_entropy computes in fp32 from the cast.
LOOM_GPU_TEST_CASE("bf16/fp16: cross_entropy with class probabilities or one sample equals casting to fp32 first") {
  Generator gen(69);
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (const Shape& sizes : {Shape{12, 7}, Shape{2, 5, 3, 4}, Shape{9}}) {
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(shape_str(sizes));
        CAPTURE(static_cast<int>(r));
        const MemoryFormat format = sizes.size() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
        const int64_t class_dim = sizes.size() == 1 ? 0 : 1;
        const Tensor target = softmax(randn(sizes, {}, &gen), class_dim).to(testing::test_gpu()).to(dtype);
        const Tensor base = (randn(sizes, {}, &gen) * 3.0).to(testing::test_gpu()).to(dtype).contiguous(format);
        const CrossEntropyOptions options{.reduction = r, .label_smoothing = 0.1};
        Tensor direct_in = base.detach().requires_grad_(true);
        Tensor cast_in = base.detach().requires_grad_(true);
        const Tensor direct = cross_entropy(direct_in, target, options);
        const Tensor cast = cross_entropy(cast_in.to(DType::Float32), target.to(DType::Float32), options);
        CHECK(direct.device() == testing::test_gpu());
        check_same_as_cast({direct, direct_in}, {cast, cast_in}, gen);
      }
    }
  }
}

LOOM_GPU_TEST_CASE("bf16/fp16: the elementwise losses compute in fp32, as under torch.autocast") {
  Generator gen(68);
  const Tensor gpu_target = rand({6, 5}, {}, &gen).to(testing::test_gpu());
  const Tensor pos_weight = tensor({0.5, 1, 1.5, 2, 3}, {5}).to(testing::test_gpu());  // exact in 16 bits
  using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, LossFn>> losses = {
      {"mse_loss", [](const Tensor& x, const Tensor& t) { return mse_loss(x, t, Reduction::None); }},
      {"l1_loss", [](const Tensor& x, const Tensor& t) { return l1_loss(x, t); }},
      {"smooth_l1_loss", [](const Tensor& x, const Tensor& t) { return smooth_l1_loss(x, t, Reduction::Sum, 0.5); }},
      {"huber_loss", [](const Tensor& x, const Tensor& t) { return huber_loss(x, t, Reduction::Mean, 2.0); }},
      {"bce_with_logits", [&pos_weight](const Tensor& x, const Tensor& t) {
         return binary_cross_entropy_with_logits(x, t, {.pos_weight = pos_weight.to(x.dtype())});
       }},
      {"kl_div", [](const Tensor& x, const Tensor& t) { return kl_div(x, t, {.reduction = Reduction::BatchMean}); }},
      {"binary_cross_entropy", [](const Tensor& x, const Tensor& t) {
         return binary_cross_entropy(clamp(x, 0.0, 1.0), t, {.reduction = Reduction::Sum});
       }},
  };
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (const auto& [name, loss] : losses) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(name);
      const Tensor base = (randn({6, 5}, {}, &gen) * 3.0).to(testing::test_gpu()).to(dtype);
      Tensor direct_in = base.detach().requires_grad_(true);
      Tensor cast_in = base.detach().requires_grad_(true);
      const Tensor direct = loss(direct_in, gpu_target.to(dtype));  // both 16-bit
      const Tensor cast = loss(cast_in.to(DType::Float32), gpu_target.to(dtype).to(DType::Float32));
      check_same_as_cast({direct, direct_in}, {cast, cast_in}, gen);
      const Tensor mixed = loss(direct_in.detach(), gpu_target);  // 16-bit input, fp32 target
      CHECK(mixed.dtype() == DType::Float32);
    }
  }
}

LOOM_GPU_TEST_CASE("bf16: mixed bf16 and fp32 operands promote to fp32") {
  Generator gen(66);
  Tensor a = leaf({4, 5}, gen), b = leaf({4, 5}, gen), bc = leaf({5}, gen);
  GpuSide mixed{.fp32_inputs = {false, true}, .output = DType::Float32};
  check_bf16("add(bf16, fp32)", [](auto& in) { return add(in[0], in[1]); }, {a, b}, mixed, kRounded, gen);
  check_bf16("mul(bf16, fp32 broadcast)", [](auto& in) { return mul(in[0], in[1]); }, {a, bc}, mixed, kRounded, gen);
  GpuSide reversed{.fp32_inputs = {true, false}, .output = DType::Float32};
  check_bf16("div(fp32, bf16)", [](auto& in) { return div(in[0], add(in[1], 4.0)); }, {a, b}, reversed, kChained, gen);
  Tensor acc = zeros({4, 5}, {.device = testing::test_gpu()});
  add_(acc, a.detach().to(testing::test_gpu()).to(DType::BFloat16));  // fp32 += bf16 casts into self
  CHECK(acc.dtype() == DType::Float32);
  CHECK_CLOSE(acc.cpu(), a.detach(), 0.0, 0.0);
}

LOOM_GPU_TEST_CASE("autocast: conv2d, linear and matmul compute in bf16, grads return fp32") {
  Generator gen(67);
  GpuSide all_fp32{.fp32_inputs = {true, true, true}, .format = MemoryFormat::ChannelsLast};
  Tensor x = leaf({2, 8, 8, 8}, gen), w = leaf({16, 8, 3, 3}, gen, 0.3), b = leaf({16}, gen);
  check_bf16("autocast conv2d", [](auto& in) {
    AutocastGuard autocast(DType::BFloat16);
    return conv2d(in[0], in[1], in[2], {.padding = {1, 1}});
  }, {x, w, b}, all_fp32, kGemm, gen);
  Tensor m = leaf({6, 32}, gen), lw = leaf({10, 32}, gen, 0.2), lb = leaf({10}, gen);
  all_fp32.format = MemoryFormat::Contiguous;
  check_bf16("autocast linear", [](auto& in) {
    AutocastGuard autocast(DType::BFloat16);
    return linear(in[0], in[1], in[2]);
  }, {m, lw, lb}, all_fp32, kGemm, gen);
  check_bf16("autocast matmul", [](auto& in) {
    AutocastGuard autocast(DType::BFloat16);
    return matmul(in[0], in[1].t());
  }, {m, lw}, all_fp32, kGemm, gen);
  // batch_norm and relu take no cast: fp32 stays fp32 under autocast.
  AutocastGuard autocast(DType::BFloat16);
  Tensor xf = x.detach().to(testing::test_gpu());
  CHECK(relu(xf).dtype() == DType::Float32);
  Tensor rm = zeros({8}, {.device = testing::test_gpu()}), rv = ones({8}, {.device = testing::test_gpu()});
  CHECK(batch_norm(xf, rm, rv, Tensor(), Tensor()).dtype() == DType::Float32);
}

// conv (C=3 -> K=16) -> bn -> relu -> max_pool 2x2 -> global max pool -> flatten -> linear (16 -> 4),
// trained with plain SGD on an MSE loss: on the GPU under autocast, and on the
// CPU in float32 (which ignores autocast) from the same initial values as the
// reference. lr 0.02: the loss's curvature along the fc weights is about
// 2/64 * 16 samples * |h|^2 (h ~ 2.4 in each of 16 channels) ~ 46, so SGD is
// stable below lr ~ 0.04; lr 0.1 diverges to inf/NaN in float32 on the CPU too.
namespace {

constexpr int kNetSteps = 25;
constexpr double kNetLr = 0.02;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.detach().to_vector<double>()) m = std::isnan(v) ? v : std::max(m, std::fabs(v));
  return m;
}

struct NetStep {
  double loss;
  std::vector<std::pair<const char*, double>> peaks;  // max |.| of each activation and grad
};

std::vector<NetStep> train_net(Device device, bool autocast) {
  Generator gen(68);
  const TensorOptions on = {.device = device};
  auto param = [&](const Shape& sizes, double scale) {
    return mul(randn(sizes, {}, &gen), scale).to(device).detach().requires_grad_(true);
  };
  Tensor conv_w = param({16, 3, 3, 3}, 0.3), conv_b = param({16}, 0.1);
  Tensor bn_w = ones({16}, on).requires_grad_(true), bn_b = zeros({16}, on).requires_grad_(true);
  Tensor fc_w = param({4, 16}, 0.25), fc_b = param({4}, 0.1);
  Tensor running_mean = zeros({16}, on), running_var = ones({16}, on);
  std::vector<Tensor> params = {conv_w, conv_b, bn_w, bn_b, fc_w, fc_b};
  const char* param_names[] = {"d conv_w", "d conv_b", "d bn_w", "d bn_b", "d fc_w", "d fc_b"};
  Tensor images = randn({16, 3, 8, 8}, {}, &gen).to(device).contiguous(MemoryFormat::ChannelsLast);
  // Targets off the untrained outputs' scale, so that the first steps clearly pay off.
  Tensor targets = add(randn({16, 4}, {}, &gen), 2.0).to(device);
  const DType act = autocast ? DType::BFloat16 : DType::Float32;

  std::vector<NetStep> steps;
  for (int step = 0; step < kNetSteps; ++step) {
    NetStep record;
    Tensor loss;
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(DType::BFloat16);
      Tensor conv = conv2d(images, conv_w, conv_b, {.padding = {1, 1}});
      CHECK(conv.dtype() == act);
      CHECK(conv.suggest_memory_format() == MemoryFormat::ChannelsLast);
      Tensor bn = batch_norm(conv, running_mean, running_var, bn_w, bn_b);
      Tensor pooled = max_pool2d(relu(bn), {.kernel_size = {2, 2}});
      Tensor h = global_max_pool2d(pooled).flatten(1);
      CHECK(bn.dtype() == act);
      CHECK(h.dtype() == act);
      Tensor logits = linear(h, fc_w, fc_b);
      CHECK(logits.dtype() == act);
      Tensor diff = sub(logits, targets);  // bf16 - fp32 promotes: the loss is fp32
      loss = mean(mul(diff, diff));
      record.peaks = {{"conv", max_abs(conv)}, {"bn", max_abs(bn)}, {"pool", max_abs(pooled)},
                      {"h", max_abs(h)}, {"logits", max_abs(logits)}};
    }
    CHECK(loss.dtype() == DType::Float32);
    loss.backward();
    record.loss = loss.item();
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor& p = params[i];
      REQUIRE(p.grad().defined());
      CHECK(p.dtype() == DType::Float32);
      CHECK(p.grad().dtype() == DType::Float32);
      record.peaks.emplace_back(param_names[i], max_abs(p.grad()));
      sub_(p, p.grad(), kNetLr);
      p.set_grad(Tensor());
    }
    CHECK(running_mean.dtype() == DType::Float32);
    steps.push_back(record);
  }
  return steps;
}

// One line per step: both losses, then the GPU's peaks, flagging the first
// non-finite one (the op where the NaN was born).
void print_net_steps(const std::vector<NetStep>& gpu, const std::vector<NetStep>& cpu) {
  bool flagged = false;
  for (size_t s = 0; s < gpu.size(); ++s) {
    std::string line = fmt::format("BF16 net step {:2} loss gpu {:.5g} cpu {:.5g} |", s, gpu[s].loss, cpu[s].loss);
    for (const auto& [name, peak] : gpu[s].peaks) {
      line += fmt::format(" {} {:.3g}", name, peak);
      if (!std::isfinite(peak) && !flagged) line += " <- first non-finite", flagged = true;
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("autocast: a conv-bn-relu-pool-linear net trains with fp32 master weights") {
  const std::vector<NetStep> gpu = train_net(testing::test_gpu(), /*autocast=*/true);
  const std::vector<NetStep> cpu = train_net(Device::cpu(), /*autocast=*/false);
  print_net_steps(gpu, cpu);
  const double first = gpu.front().loss, last = gpu.back().loss;
  std::printf("BF16 autocast net loss %.4f -> %.4f (cpu fp32 %.4f -> %.4f)\n", first, last,
              cpu.front().loss, cpu.back().loss);
  // The first loss differs from the CPU's only by bf16 rounding of one forward pass.
  CHECK(std::fabs(first - cpu.front().loss) <= 0.02 * cpu.front().loss);
  CHECK(std::isfinite(last));
  CHECK(last < 0.3 * first);  // the fp32 CPU run reaches 0.07 * first
}
