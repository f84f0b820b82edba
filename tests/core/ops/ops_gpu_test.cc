// File: tests/core/ops/ops_gpu_test.cc
// Every op, forward and backward, on the GPU against the CPU reference, on fresh
// random inputs over a grid of configs, in NCHW and channels-last, under strict
// fp32 (tight tolerance), tf32 and bf16 compute (looser tolerances for conv and
// matmul, which run on tensor cores; other ops do not change with the policy).
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). Each check prints
// one "PARITY op layout policy fwd=... bwd=..." line for the op table.
//
// N batch, C channels, H, W, K out channels / classes.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Tolerance {
  double fwd, bwd;
};

double normalized_error(const Tensor& gpu_result, const Tensor& cpu_result) {
  std::vector<double> a = testing::values(gpu_result), b = testing::values(cpu_result);
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

Tensor to_gpu(const Tensor& t, MemoryFormat format) {
  Tensor g = t.detach().to(testing::test_gpu());
  if (t.dim() == 4 && is_floating(t.dtype())) g = g.contiguous(format);
  return t.requires_grad() ? g.requires_grad_(true) : g;
}

std::vector<Tensor> fresh_leaves(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.detach().clone();
    leaves.push_back(t.requires_grad() ? leaf.requires_grad_(true) : leaf);
  }
  return leaves;
}

// Runs `op` on CPU copies and GPU copies of `inputs`, backpropagates the same
// random gradient through both, and checks output and input gradients.
void check_parity(const std::string& name, const OpFn& op, const std::vector<Tensor>& inputs,
                  MemoryFormat format, Tolerance tol, Generator& gen) {
  CAPTURE(name);
  CAPTURE(memory_format_name(format));
  std::vector<Tensor> cpu_in = fresh_leaves(inputs), gpu_in;
  for (const Tensor& t : cpu_in) gpu_in.push_back(to_gpu(t, format));
  Tensor cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  REQUIRE(gpu_out.device().is_cuda());
  double fwd = normalized_error(gpu_out.cpu(), cpu_out), bwd = 0;
  if (cpu_out.requires_grad()) {
    Tensor g = randn(cpu_out.sizes(), {.dtype = cpu_out.dtype()}, &gen);
    cpu_out.backward(g);
    gpu_out.backward(g.to(testing::test_gpu()));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      if (!cpu_in[i].requires_grad()) continue;
      REQUIRE(gpu_in[i].grad().defined());
      CHECK(gpu_in[i].grad().device().is_cuda());
      bwd = std::max(bwd, normalized_error(gpu_in[i].grad().cpu(), cpu_in[i].grad()));
    }
  }
  std::printf("PARITY %-28s %-13s %-11s fwd=%.2e bwd=%.2e\n", name.c_str(),
              std::string(memory_format_name(format)).c_str(),
              std::string(precision_name(numerics_policy().precision)).c_str(), fwd, bwd);
  CHECK(fwd <= tol.fwd);
  CHECK(bwd <= tol.bwd);
}

Tensor leaf(const Shape& sizes, Generator& gen, double scale = 1.0, double shift = 0.0) {
  return add(mul(randn(sizes, {}, &gen), scale), shift).detach().requires_grad_(true);
}

constexpr MemoryFormat kLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};
constexpr Tolerance kExact{1e-6, 1e-6};    // elementwise: same formula, same precision
constexpr Tolerance kSummed{1e-5, 1e-5};   // reductions: a different summation order
constexpr Tolerance kStrict{1e-5, 1e-4};   // conv/matmul/bn in strict fp32
constexpr Tolerance kTf32{5e-3, 1e-2};     // conv/matmul on tf32 tensor cores
constexpr Tolerance kBf16{3e-2, 6e-2};     // conv/matmul computing in bf16 (8-bit mantissa)

}  // namespace

LOOM_GPU_TEST_CASE("elementwise ops and activations match the CPU on the GPU") {
  Generator gen(51);
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({2, 3, 4, 5}, gen), b = leaf({2, 3, 4, 5}, gen), bc = leaf({3, 1, 1}, gen);
    Tensor pos = leaf({2, 3, 4, 5}, gen, 0.5, 3.0);
    check_parity("add", [](auto& in) { return add(in[0], in[1], 0.5); }, {a, b}, f, kExact, gen);
    check_parity("sub(broadcast)", [](auto& in) { return sub(in[0], in[1]); }, {a, bc}, f, kSummed, gen);
    check_parity("mul(broadcast)", [](auto& in) { return mul(in[0], in[1]); }, {a, bc}, f, kSummed, gen);
    check_parity("div", [](auto& in) { return div(in[0], in[1]); }, {a, pos}, f, kExact, gen);
    check_parity("scalar ops", [](auto& in) { return 2.0 - in[0] * 3.0 + 1.0 / in[1]; }, {a, pos}, f, kExact, gen);
    check_parity("neg", [](auto& in) { return neg(in[0]); }, {a}, f, kExact, gen);
    check_parity("exp", [](auto& in) { return exp(in[0]); }, {a}, f, kExact, gen);
    check_parity("log", [](auto& in) { return log(in[0]); }, {pos}, f, kExact, gen);
    check_parity("sqrt", [](auto& in) { return sqrt(in[0]); }, {pos}, f, kExact, gen);
    check_parity("pow", [](auto& in) { return pow(in[0], 1.7); }, {pos}, f, kExact, gen);
    check_parity("clamp", [](auto& in) { return clamp(in[0], -0.5, 0.7); }, {a}, f, kExact, gen);
    check_parity("relu", [](auto& in) { return relu(in[0]); }, {a}, f, kExact, gen);
    check_parity("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {a}, f, kExact, gen);
    check_parity("tanh", [](auto& in) { return tanh(in[0]); }, {a}, f, kExact, gen);
    check_parity("gelu", [](auto& in) { return gelu(in[0]); }, {a}, f, kExact, gen);
    check_parity("silu", [](auto& in) { return silu(in[0]); }, {a}, f, kExact, gen);
    Tensor big = leaf({8, 64, 4, 4}, gen);  // 8192 elements: takes the cuDNN pointwise path
    check_parity("relu(cudnn graph)", [](auto& in) { return relu(in[0]); }, {big}, f, kExact, gen);
  }
}

LOOM_GPU_TEST_CASE("reductions match the CPU on the GPU") {
  Generator gen(52);
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({4, 6, 5, 7}, gen);
    check_parity("sum", [](auto& in) { return sum(in[0]); }, {x}, f, kSummed, gen);
    check_parity("sum(dims 0,2,3)", [](auto& in) { return sum(in[0], {0, 2, 3}); }, {x}, f, kSummed, gen);
    check_parity("mean(dim 1, keepdim)", [](auto& in) { return mean(in[0], {1}, true); }, {x}, f, kSummed, gen);
    check_parity("max", [](auto& in) { return max(in[0]); }, {x}, f, kExact, gen);
    check_parity("max(dim 3)", [](auto& in) { return max(in[0], 3).values; }, {x}, f, kExact, gen);
    check_parity("argmax(dim 1)", [](auto& in) { return argmax(in[0], 1); }, {x}, f, {0, 0}, gen);
  }
}

LOOM_GPU_TEST_CASE("vector_norm, cosine_similarity, pairwise_distance, lp_normalize match the CPU on random configs") {
  Generator gen(59);
  const double kOrds[] = {0.0, 0.5, 1.0, 2.0, 3.0, INFINITY, -INFINITY};
  for (int trial = 0; trial < 24; ++trial) {
    const MemoryFormat f = kLayouts[trial % 2];
    const double ord = kOrds[trial % 7];
    Shape dims;  // a random subset of the four dims; empty means all of them
    for (int64_t d = 0; d < 4; ++d) {
      if (rand({1}, {}, &gen).item() < 0.5) dims.push_back(rand({1}, {}, &gen).item() < 0.5 ? d : d - 4);
    }
    const bool keepdim = trial % 3 == 0;
    Tensor x = leaf({2 + trial % 3, 5, 3, 4}, gen);
    CAPTURE(ord);
    CAPTURE(shape_str(dims));
    check_parity("vector_norm", [&](auto& in) { return vector_norm(in[0], ord, dims, keepdim); }, {x}, f, kSummed,
                 gen);
  }
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({3, 8, 4, 5}, gen), b = leaf({3, 8, 4, 5}, gen), row = leaf({1, 8, 1, 5}, gen);
    check_parity("cosine_similarity(dim 1)", [](auto& in) { return cosine_similarity(in[0], in[1]); }, {a, b}, f,
                 kSummed, gen);
    check_parity("cosine_similarity(broadcast)", [](auto& in) { return cosine_similarity(in[0], in[1], -1); },
                 {a, row}, f, kSummed, gen);
    check_parity("pairwise_distance", [](auto& in) { return pairwise_distance(in[0], in[1]); }, {a, b}, f, kSummed,
                 gen);
    check_parity("pairwise_distance(p 1)", [](auto& in) { return pairwise_distance(in[0], in[1], 1.0); }, {a, row},
                 f, kSummed, gen);
    check_parity("lp_normalize", [](auto& in) { return lp_normalize(in[0]); }, {a}, f, kSummed, gen);
    check_parity("lp_normalize(p 1, dim -1)", [](auto& in) { return lp_normalize(in[0], 1.0, -1); }, {b}, f,
                 kSummed, gen);
  }
  // cdist: the differences path (p 1, 3, inf; p 2 up to 25 rows) and the matrix product (p 2, 40 rows).
  const Tensor rows = leaf({2, 40, 16}, gen), few = leaf({2, 7, 16}, gen), others = leaf({2, 9, 16}, gen);
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    check_parity(fmt::format("cdist(p {})", p), [p](auto& in) { return cdist(in[0], in[1], p); }, {few, others},
                 MemoryFormat::Contiguous, kSummed, gen);
  }
  {
    NumericsGuard strict({.precision = Precision::StrictFp32});  // the product in IEEE fp32, as on the CPU
    check_parity("cdist(matmul)", [](auto& in) { return cdist(in[0], in[1]); }, {rows, others},
                 MemoryFormat::Contiguous, kSummed, gen);
  }
  // bf16 operands (exact in bf16 on both sides) against float32 on the CPU.
  const Tensor a32 = randn({16, 64}, {}, &gen).to(DType::BFloat16).to(DType::Float32);
  const Tensor b32 = randn({16, 64}, {}, &gen).to(DType::BFloat16).to(DType::Float32);
  const Tensor a16 = a32.to(testing::test_gpu()).to(DType::BFloat16);
  const Tensor b16 = b32.to(testing::test_gpu()).to(DType::BFloat16);
  const Tensor s16 = cosine_similarity(a16, b16);
  CHECK(s16.dtype() == DType::BFloat16);
  CHECK(normalized_error(s16.to(DType::Float32).cpu(), cosine_similarity(a32, b32)) <= 3e-2);
  CHECK(normalized_error(vector_norm(a16, 2.0, {1}).to(DType::Float32).cpu(), vector_norm(a32, 2.0, {1})) <= 3e-2);
}

LOOM_GPU_TEST_CASE("triplet_margin_loss and cosine_embedding_loss match the CPU on the GPU") {
  Generator gen(60);
  const Tensor a = leaf({16, 12}, gen), p = leaf({16, 12}, gen), n = leaf({16, 12}, gen);
  for (bool swap : {false, true}) {
    check_parity(swap ? "triplet_margin_loss(swap)" : "triplet_margin_loss",
                 [swap](auto& in) { return triplet_margin_loss(in[0], in[1], in[2], {.margin = 1.5, .swap = swap}); },
                 {a, p, n}, MemoryFormat::Contiguous, kSummed, gen);
  }
  const Tensor target = tensor({1, -1, 1, 1, -1, -1, 1, -1, 1, -1, -1, 1, 1, 1, -1, -1}, {16}, {.dtype = DType::Int64});
  check_parity("cosine_embedding_loss",
               [&target](auto& in) {
                 return cosine_embedding_loss(in[0], in[1], target.to(in[0].device()),
                                              {.margin = -0.3, .reduction = Reduction::Sum});
               },
               {a, p}, MemoryFormat::Contiguous, kSummed, gen);
}

LOOM_GPU_TEST_CASE("conv2d, linear and matmul match the CPU on the GPU") {
  Generator gen(53);
  struct ConvCase {
    Shape x, w;
    Conv2dOptions o;
  };
  const ConvCase cases[] = {
      {{4, 3, 12, 12}, {8, 3, 3, 3}, {.padding = {1, 1}}},
      {{2, 8, 9, 9}, {16, 8, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
      {{2, 8, 10, 10}, {8, 4, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}, .groups = 2}},
      {{2, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2, 2}}},
  };
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32, Precision::Bf16}) {
    NumericsGuard guard({.precision = precision});
    Tolerance tol = precision == Precision::StrictFp32 ? kStrict
                    : precision == Precision::Tf32     ? kTf32
                                                       : kBf16;
    for (MemoryFormat f : kLayouts) {
      for (const ConvCase& c : cases) {
        Tensor x = leaf(c.x, gen), w = leaf(c.w, gen, 0.3), b = leaf({c.w[0]}, gen);
        check_parity("conv2d(bias) " + shape_str(c.x),
                     [&](auto& in) { return conv2d(in[0], in[1], in[2], c.o); }, {x, w, b}, f, tol, gen);
      }
      Tensor x = leaf({16, 400}, gen), w = leaf({120, 400}, gen, 0.05), b = leaf({120}, gen);
      check_parity("linear", [](auto& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}, f, tol, gen);
      Tensor p = leaf({3, 5, 7}, gen), q = leaf({7, 4}, gen);
      check_parity("matmul(batched)", [](auto& in) { return matmul(in[0], in[1]); }, {p, q}, f, tol, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("conv1d and the 1-D poolings match the CPU on the GPU, NCL and length-major") {
  Generator gen(58);
  struct Conv1dCase {
    Shape x, w;
    Conv1dOptions o;
  };
  const Conv1dCase cases[] = {
      {{4, 1, 160}, {16, 1, 9}, {.stride = 2, .padding = 4}},   // a waveform's first layer
      {{2, 16, 37}, {32, 16, 3}, {.padding = 2, .dilation = 2}},
      {{3, 24, 50}, {24, 1, 5}, {.padding = 2, .groups = 24}},  // depthwise
      {{2, 12, 21}, {18, 4, 4}, {.stride = 3, .padding = 1, .groups = 3}},
  };
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32, Precision::Bf16}) {
    NumericsGuard guard({.precision = precision});
    const Tolerance tol = precision == Precision::StrictFp32 ? kStrict : precision == Precision::Tf32 ? kTf32 : kBf16;
    for (MemoryFormat f : kLayouts) {
      // channels-last stands for length-major: x (N, L, C) transposed
      auto layout = [f](const Tensor& x) {
        return f == MemoryFormat::ChannelsLast ? x.transpose(1, 2).contiguous().transpose(1, 2) : x;
      };
      for (const Conv1dCase& c : cases) {
        Tensor x = leaf(c.x, gen), w = leaf(c.w, gen, 0.3), b = leaf({c.w[0]}, gen);
        check_parity("conv1d " + shape_str(c.x),
                     [&](auto& in) { return conv1d(layout(in[0]), in[1], in[2], c.o); }, {x, w, b}, f, tol, gen);
      }
    }
  }
  const Pool1dOptions window{
      .kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false};
  for (MemoryFormat f : kLayouts) {
    auto layout = [f](const Tensor& x) {
      return f == MemoryFormat::ChannelsLast ? x.transpose(1, 2).contiguous().transpose(1, 2) : x;
    };
    Tensor x = leaf({3, 10, 29}, gen);
    check_parity("max_pool1d", [&](auto& in) { return max_pool1d(layout(in[0]), window); }, {x}, f, kExact, gen);
    check_parity("avg_pool1d", [&](auto& in) { return avg_pool1d(layout(in[0]), window); }, {x}, f, kSummed, gen);
    check_parity("adaptive_avg_pool1d", [&](auto& in) { return adaptive_avg_pool1d(layout(in[0]), 7); }, {x}, f,
                 kSummed, gen);
    check_parity("adaptive_max_pool1d", [&](auto& in) { return adaptive_max_pool1d(layout(in[0]), 7); }, {x}, f,
                 kExact, gen);
  }
}

LOOM_GPU_TEST_CASE("batch norm, pooling and softmax match the CPU on the GPU") {
  Generator gen(54);
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({4, 8, 6, 6}, gen, 2.0, 0.5), w = leaf({8}, gen, 0.2, 1.0), b = leaf({8}, gen);
    for (bool training : {true, false}) {
      check_parity(training ? "batch_norm(train)" : "batch_norm(eval)", [training](auto& in) {
        Tensor rm = zeros({8}, {.device = in[0].device()}), rv = ones({8}, {.device = in[0].device()});
        return batch_norm(in[0], rm, rv, in[1], in[2], {.training = training});
      }, {x, w, b}, f, kStrict, gen);
    }
    Tensor y = leaf({2, 4, 9, 9}, gen);
    for (const Pool2dOptions& o : {Pool2dOptions{.kernel_size = {2, 2}},
                                   Pool2dOptions{.kernel_size = {3, 3}, .stride = std::array<int64_t, 2>{2, 2}, .padding = {1, 1}},
                                   Pool2dOptions{.kernel_size = {2, 2}, .ceil_mode = true}}) {
      check_parity("max_pool2d", [o](auto& in) { return max_pool2d(in[0], o); }, {y}, f, kExact, gen);
      check_parity("avg_pool2d", [o](auto& in) { return avg_pool2d(in[0], o); }, {y}, f, kSummed, gen);
    }
    check_parity("global_avg_pool2d", [](auto& in) { return global_avg_pool2d(in[0]); }, {y}, f, kSummed, gen);
    check_parity("global_max_pool2d", [](auto& in) { return global_max_pool2d(in[0]); }, {y}, f, kExact, gen);
    Tensor s = leaf({4, 10, 3, 3}, gen, 2.0);
    check_parity("softmax(dim 1)", [](auto& in) { return softmax(in[0], 1); }, {s}, f, kSummed, gen);
    check_parity("log_softmax(dim 1)", [](auto& in) { return log_softmax(in[0], 1); }, {s}, f, kSummed, gen);
    check_parity("softmax(dim -1)", [](auto& in) { return softmax(in[0], -1); }, {s}, f, kSummed, gen);
  }
}

LOOM_GPU_TEST_CASE("losses, dropout and cat match the CPU on the GPU") {
  Generator gen(55);
  Tensor logits = leaf({16, 10}, gen, 2.0);
  Tensor target = randint(0, 10, {16}, {.dtype = DType::Int64}, &gen);
  for (double smoothing : {0.0, 0.1}) {
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      check_parity("cross_entropy", [=](auto& in) {
        return cross_entropy(in[0], in[1], {.reduction = r, .label_smoothing = smoothing});
      }, {logits, target}, MemoryFormat::Contiguous, kSummed, gen);
    }
  }
  Tensor logits4 = leaf({2, 5, 3, 3}, gen), target4 = randint(0, 5, {2, 3, 3}, {.dtype = DType::Int64}, &gen);
  for (MemoryFormat f : kLayouts) {
    check_parity("cross_entropy(N,C,H,W)", [](auto& in) { return cross_entropy(in[0], in[1]); },
                 {logits4, target4}, f, kSummed, gen);
  }
  Tensor lp = leaf({16, 10}, gen);
  check_parity("nll_loss", [](auto& in) { return nll_loss(in[0], in[1]); }, {lp, target},
               MemoryFormat::Contiguous, kSummed, gen);
  Tensor u = leaf({4, 7}, gen), v = leaf({4, 7}, gen);
  check_parity("mse_loss", [](auto& in) { return mse_loss(in[0], in[1]); }, {u, v},
               MemoryFormat::Contiguous, kSummed, gen);
  Tensor d = leaf({64, 33}, gen);
  check_parity("dropout (same seed, same mask)", [](auto& in) {
    Generator local(7);
    return dropout(in[0], 0.3, /*training=*/true, &local);
  }, {d}, MemoryFormat::Contiguous, kExact, gen);
  Tensor c0 = leaf({2, 3, 4}, gen), c1 = leaf({2, 5, 4}, gen);
  check_parity("cat(dim 1)", [](auto& in) { return cat({in[0], in[1]}, 1); }, {c0, c1},
               MemoryFormat::Contiguous, kExact, gen);
}

// The GPU names a bad class target from its kernels' device totals (the CPU
// from the target itself): the same IndexError, and the next call is unharmed.
LOOM_GPU_TEST_CASE("cross_entropy and nll_loss on the GPU name an out-of-range target as the CPU does") {
  const Device gpu = testing::test_gpu();
  const TensorOptions i64{.dtype = DType::Int64};
  const Tensor logits = zeros({4, 10}).to(gpu);
  const Tensor bad = tensor({1, 2, 3, 12}, {4}, i64).to(gpu);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CHECK_THROWS_WITH_FRAGMENT(cross_entropy(logits, bad, {.reduction = r}), IndexError,
                               "[cross_entropy] target 12 at position 3 is out of range for 10 classes (expected 0 "
                               "to 9, or ignore_index -100)");
  }
  const Tensor bad4 = tensor({0, 1, 2, 0, 1, 2, -1, 0}, {2, 2, 2}, i64).to(gpu);
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(zeros({2, 3, 2, 2}).to(gpu), bad4), IndexError,
                             "target -1 at position (1, 1, 0) is out of range for 3 classes");
  CHECK_THROWS_WITH_FRAGMENT(nll_loss(zeros({2, 3}).to(gpu), tensor({5, 0}, {2}, i64).to(gpu)), IndexError,
                             "[nll_loss] target 5 at position 0 is out of range for 3 classes");
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy(zeros({10}).to(gpu), full({}, 10.0, i64).to(gpu)), IndexError,
                             "target 10 at position 0 is out of range for 10 classes");
  // ignore_index is no error; the mean skips it, and the call after a bad one is right.
  const Tensor ignored = tensor({1, -100, 3, 0}, {4}, i64).to(gpu);
  CHECK(cross_entropy(logits, ignored).item() == doctest::Approx(std::log(10.0)));
  CHECK(cross_entropy(logits, ignored, {.reduction = Reduction::Sum}).item() == doctest::Approx(3 * std::log(10.0)));
}

LOOM_GPU_TEST_CASE("interpolate and pad match the CPU on the GPU, every mode and layout") {
  Generator gen(56);
  const InterpolateOptions resizes[] = {
      {.scale_factor = 2.0},
      {.size = Size2{7, 13}},
      {.scale_factor = Scale2{1.7, 0.6}},
      {.scale_factor = 2.0, .mode = InterpolateMode::Bilinear},
      {.size = Size2{11, 4}, .mode = InterpolateMode::Bilinear, .align_corners = true},
      {.scale_factor = Scale2{0.5, 2.5}, .mode = InterpolateMode::Bilinear},
      {.scale_factor = 1.3, .mode = InterpolateMode::Bilinear, .recompute_scale_factor = true},
  };
  struct PadCase {
    std::vector<int64_t> pads;
    PadMode mode;
  };
  const PadCase pads[] = {
      {{1, 2, 3, 0}, PadMode::Constant}, {{-1, 2, 0, 0, 1, 1}, PadMode::Constant},
      {{3, 2, 1, 4}, PadMode::Reflect},  {{-2, 1, 2, -1}, PadMode::Reflect},
      {{4, 1, 0, 5}, PadMode::Replicate}, {{-3, 2, 1, 1}, PadMode::Replicate},
  };
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({2, 5, 6, 9}, gen);
    for (const InterpolateOptions& o : resizes) {
      check_parity(std::string("interpolate(") + interpolate_mode_name(o.mode) + ")",
                   [o](auto& in) { return interpolate(in[0], o); }, {x}, f, kSummed, gen);
    }
    for (const PadCase& p : pads) {
      check_parity(std::string("pad(") + pad_mode_name(p.mode) + ")",
                   [p](auto& in) { return pad(in[0], p.pads, p.mode, 0.5); }, {x}, f, kExact, gen);
    }
  }
}

LOOM_GPU_TEST_CASE("constant pads of channels-last tensors and their strided views match the CPU") {
  // Channel pads of whole 16-byte packs run a pack at a time on the GPU (the
  // CIFAR ResNets' option-A shortcut pads every second row and column of a
  // channels-last tensor); other pads, element by element. Random cases of both.
  Generator gen(58);
  std::mt19937 rng(58);
  auto pick = [&rng](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t channels = 4 * pick(1, 6), stride = pick(1, 2);
    const bool whole_packs = pick(0, 3) > 0;
    const int64_t before = whole_packs ? 4 * pick(-1, 2) : pick(-1, 3);
    const int64_t after = whole_packs ? 4 * pick(0, 2) : pick(0, 3);
    const std::vector<int64_t> pads = {pick(0, 1), pick(0, 2), pick(-1, 1), pick(0, 1),
                                       std::max(before, -channels / 2), after};
    CAPTURE(trial);
    CAPTURE(channels);
    CAPTURE(stride);
    CAPTURE(pads[4]);
    CAPTURE(pads[5]);
    Tensor x = leaf({pick(1, 3), channels, 2 * pick(2, 5), 2 * pick(2, 5)}, gen);
    check_parity("pad(constant) of a strided channels-last view", [pads, stride](auto& in) {
      return pad(in[0].slice(2, 0, in[0].size(2), stride).slice(3, 0, in[0].size(3), stride), pads);
    }, {x}, MemoryFormat::ChannelsLast, kExact, gen);
  }
}

LOOM_GPU_TEST_CASE("interpolate and pad on bf16 and fp16 tensors match the CPU in float32") {
  Generator gen(57);
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    for (MemoryFormat f : kLayouts) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(memory_format_name(f));
      // Values exactly representable in 16 bits, so both sides start equal.
      const Tensor x32 = randn({2, 3, 5, 6}, {}, &gen).to(dtype).to(DType::Float32);
      Tensor x16 = x32.to(testing::test_gpu()).to(dtype).contiguous(f).requires_grad_(true);
      Tensor xc = x32.clone().requires_grad_(true);
      const InterpolateOptions o{.scale_factor = Scale2{1.5, 2.0}, .mode = InterpolateMode::Bilinear};
      Tensor y16 = interpolate(x16, o), yc = interpolate(xc, o);
      CHECK(y16.dtype() == dtype);
      CHECK(normalized_error(y16.to(DType::Float32).cpu(), yc) <= 1e-2);
      const Tensor g = randn(yc.sizes(), {}, &gen).to(dtype).to(DType::Float32);
      y16.backward(g.to(testing::test_gpu()).to(dtype));
      yc.backward(g);
      CHECK(normalized_error(x16.grad().to(DType::Float32).cpu(), xc.grad()) <= 2e-2);
      const Tensor p16 = pad(x16.detach(), {2, 1, 1, 2}, PadMode::Reflect);
      CHECK(normalized_error(p16.to(DType::Float32).cpu(), pad(x32, {2, 1, 1, 2}, PadMode::Reflect)) == 0);
    }
  }
}

LOOM_GPU_TEST_CASE("abs, masks, isclose, cat promotion and dropout2d match the CPU on the GPU") {
  Generator gen(58);
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({2, 3, 4, 5}, gen), w = leaf({2, 3, 4, 5}, gen);
    check_parity("abs", [](auto& in) { return abs(in[0]); }, {a}, f, kExact, gen);
    check_parity("mask ops", [](auto& in) {
      const Tensor m = (gt(in[0], 0.0) ^ gt(in[1], 0.5)) | ~lt(in[1], -1.0);
      const Tensor keep = logical_and(m, logical_not(isclose(in[0], in[1], 0.5, 0.1)));
      return add(mul(keep, in[0]), where(logical_or(keep, gt(in[0], 1.0)), in[1], zeros_like(in[1])));
    }, {a, w}, f, kExact, gen);
    check_parity("dropout2d (same seed, same channels)", [](auto& in) {
      Generator local(9);
      return dropout2d(in[0], 0.4, /*training=*/true, &local);
    }, {a}, f, kExact, gen);
  }
  Tensor p = leaf({2, 3}, gen), q = leaf({4, 3}, gen);
  // A float32 parameter meeting bf16 activations (autocast's case): float32 out, and
  // the bf16 input's gradient rounded to bf16 and back on both sides alike.
  check_parity("cat(float32, bf16)", [](auto& in) {
    const Tensor y = cat({in[0], in[1].to(DType::BFloat16)}, 0);
    REQUIRE(y.dtype() == DType::Float32);
    return y;
  }, {p, q}, MemoryFormat::Contiguous, kExact, gen);
  check_parity("stack(dim 1)", [](auto& in) { return stack({in[0], in[0] * 2.0}, 1); }, {p},
               MemoryFormat::Contiguous, kExact, gen);
  // Bool results: equal masks, elementwise.
  const Tensor x = randn({64, 33}, {}, &gen), y = x + randn({64, 33}, {}, &gen) * 1e-3;
  for (double rtol : {1e-5, 1e-3, 1e-2}) {
    CHECK(equal(isclose(x, y, rtol, 1e-4).to(testing::test_gpu()).cpu(),
                isclose(x.to(testing::test_gpu()), y.to(testing::test_gpu()), rtol, 1e-4).cpu()));
  }
  CHECK(allclose(x.to(testing::test_gpu()), x.to(testing::test_gpu())));
  CHECK_FALSE(equal(x.to(testing::test_gpu()), y.to(testing::test_gpu())));
  const Tensor bools = x > 0;
  CHECK(equal((~bools).cpu(), (~bools.to(testing::test_gpu())).cpu()));
}

// Composites of existing kernels (scalar arithmetic, rounding, comparisons and where),
// so the GPU runs them without kernels of their own and gives the CPU's values.
LOOM_GPU_TEST_CASE("round(x, decimals), integer clamp, the number first in // and %, and %= match the CPU") {
  Generator gen(59);
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({2, 3, 4, 5}, gen, 30.0), pos = leaf({2, 3, 4, 5}, gen, 0.5, 3.0);
    check_parity("round(decimals 2)", [](auto& in) { return round(in[0], 2); }, {a}, f, kExact, gen);
    check_parity("round(decimals -1)", [](auto& in) { return round(in[0], -1); }, {a}, f, kExact, gen);
    check_parity("remainder(number, x)", [](auto& in) { return remainder(7.3, in[0]); }, {pos}, f, kExact, gen);
    check_parity("number % x (negative x)", [](auto& in) { return -7.3 % -in[0]; }, {pos}, f, kExact, gen);
    check_parity("floor_divide(number, x)", [](auto& in) { return floor_divide(7.3, in[0]); }, {pos}, f, kExact,
                 gen);
  }
  const Device gpu = testing::test_gpu();
  const Tensor labels = randint(-50, 50, {6, 7}, {.dtype = DType::Int64}, &gen);
  // Odd divisors from -7 to 7: no zero to divide by.
  const Tensor divisors = randint(1, 9, {6, 7}, {.dtype = DType::Int64}, &gen) * 2.0 - 9.0;
  const Tensor x32 = mul(randn({6, 7}, {}, &gen), 20.0).to(DType::BFloat16).to(DType::Float32);
  const std::vector<const char*> names = {
      "clamp(int64)", "clamp(uint8, min dropped)", "clamp(mask)", "clamp(int64, fractional min)",
      "remainder(number, int64)", "floor_divide(number, int64)", "int64 %= number", "int64 %= int64 (strided)",
      "float32 %= number", "round(bf16, 1) in float32"};
  const auto results = [&](const Device& on) {
    const Tensor l = labels.to(on), d = divisors.to(on), x = x32.to(on);
    Tensor by_number = l.clone(), by_tensor = l.clone(), floats = x.clone();
    by_number %= 7.0;
    by_tensor %= d.t().contiguous().t();
    floats %= -2.5;
    const Tensor bf16 = on.is_cuda() ? round(x.to(DType::BFloat16), 1).to(DType::Float32)
                                     : round(x, 1).to(DType::BFloat16).to(DType::Float32);
    return std::vector<Tensor>{clamp(l, -20.0, 30.0), clamp((l + 60.0).to(DType::UInt8), -1.0, 70.0),
                               clamp(l > 0, 0.0, 0.0), clamp(l, 1.5, std::nullopt), remainder(7.0, d),
                               floor_divide(-50.0, d), by_number, by_tensor, floats, bf16};
  };
  const std::vector<Tensor> expected = results(Device::cpu()), actual = results(gpu);
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(actual[i].device() == gpu);
    CHECK(actual[i].dtype() == expected[i].dtype());
    CHECK(testing::values(actual[i]) == testing::values(expected[i]));
  }
}

LOOM_GPU_TEST_CASE("mixed dtypes promote on the GPU as on the CPU: pixels, labels, float32 with float64") {
  const Tensor pixels = randint(0, 256, {2, 3, 4, 5}, {.dtype = DType::UInt8}).contiguous(MemoryFormat::ChannelsLast);
  const Tensor labels = randint(1, 10, {7}, {.dtype = DType::Int64});  // no zero to divide by
  const Tensor f32 = randn({7}), f64 = randn({7}, {.dtype = DType::Float64});
  const std::vector<const char*> names = {"pixels / 255", "labels / labels reversed (a true division)",
                                          "labels * f32", "f32 - f64", "1.5 / labels"};
  const auto results = [&](const Device& on) {
    const Tensor p = pixels.to(on), l = labels.to(on), a = f32.to(on), b = f64.to(on);
    return std::vector<Tensor>{div(p, 255.0), div(l, flip(l, {0})), mul(l, a), sub(a, b), rdiv(l, 1.5)};
  };
  const std::vector<Tensor> expected = results(Device::cpu()), actual = results(testing::test_gpu());
  for (size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(actual[i].device() == testing::test_gpu());
    CHECK(actual[i].dtype() == expected[i].dtype());
    CHECK(is_floating(actual[i].dtype()));
    CHECK_CLOSE(actual[i].cpu(), expected[i], 1e-6, 1e-7);
  }
}

// Masks, copies and host-made factories compute nothing that rounds, so the GPU
// gives the CPU's values bit for bit; the gradients are small integers, which
// repeat's sum over its copies adds exactly in any order.
LOOM_GPU_TEST_CASE("tril, triu, repeat, the pixel shuffles, eye and linspace match the CPU exactly on the GPU, "
                   "every dtype") {
  const Device gpu = testing::test_gpu();
  Generator gen(91);
  const std::vector<std::pair<std::string, OpFn>> ops = {
      {"tril", [](auto& in) { return tril(in[0]); }},
      {"tril(-1)", [](auto& in) { return tril(in[0], -1); }},
      {"triu(2)", [](auto& in) { return triu(in[0], 2); }},
      {"triu(strided)", [](auto& in) { return triu(in[0].transpose(1, 2)); }},
      {"repeat", [](auto& in) { return repeat(in[0], {2, 1, 3, 2}); }},
      {"repeat(method)", [](auto& in) { return in[0].repeat({1, 2, 1}); }},
      {"repeat(5 repeated dims)", [](auto& in) { return repeat(in[0], {2, 2, 2, 1, 3, 2}); }},
      {"pixel_shuffle", [](auto& in) { return pixel_shuffle(repeat(in[0], {2, 1, 1}), 2); }},
      {"pixel_unshuffle", [](auto& in) { return pixel_unshuffle(repeat(in[0], {1, 2, 1}), 2); }},
      {"pixel_shuffle(channels-last)", [](auto& in) {
         return pixel_shuffle(in[0].unsqueeze(0).repeat({1, 2, 1, 1}).contiguous(MemoryFormat::ChannelsLast), 2);
       }},
  };
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64, DType::Bool}) {
    const Tensor source = randint(-4, 5, {2, 3, 4}, {.dtype = DType::Int64}, &gen).to(dtype);
    for (const auto& [name, op] : ops) {
      CAPTURE(name);
      CAPTURE(dtype_name(dtype));
      const bool differentiable = is_floating(dtype);
      Tensor x_cpu = source.clone(), x_gpu = source.to(gpu);
      if (differentiable) {
        x_cpu.requires_grad_(true);
        x_gpu.requires_grad_(true);
      }
      const Tensor y_cpu = op({x_cpu}), y_gpu = op({x_gpu});
      REQUIRE(y_gpu.device() == gpu);
      CHECK(y_gpu.dtype() == y_cpu.dtype());
      CHECK(y_gpu.sizes() == y_cpu.sizes());
      CHECK(testing::values(y_gpu) == testing::values(y_cpu));
      if (!differentiable) continue;
      const Tensor dy = randint(-4, 5, y_cpu.sizes(), {.dtype = DType::Int64}, &gen).to(dtype);
      y_cpu.backward(dy);
      y_gpu.backward(dy.to(gpu));
      REQUIRE(x_gpu.grad().defined());
      CHECK(x_gpu.grad().device() == gpu);
      const std::vector<double> dx_gpu = testing::values(x_gpu.grad()), dx_cpu = testing::values(x_cpu.grad());
      CHECK_MESSAGE(dx_gpu == dx_cpu, fmt::format("GPU {}\nCPU {}", fmt::join(dx_gpu, " "), fmt::join(dx_cpu, " ")));
    }
  }
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64, DType::Bool}) {
    CAPTURE(dtype_name(dtype));
    const Tensor identity = eye(5, 7, {.dtype = dtype, .device = gpu});
    CHECK(identity.device() == gpu);
    CHECK(identity.dtype() == dtype);
    CHECK(testing::values(identity) == testing::values(eye(5, 7, {.dtype = dtype})));
    if (dtype == DType::Bool) continue;  // linspace has no Bool form
    const Tensor grid = linspace(-3.5, 11.25, 19, {.dtype = dtype, .device = gpu});
    CHECK(grid.device() == gpu);
    CHECK(testing::values(grid) == testing::values(linspace(-3.5, 11.25, 19, {.dtype = dtype})));
  }
}
