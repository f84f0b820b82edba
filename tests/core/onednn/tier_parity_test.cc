// File: tests/core/onednn/tier_parity_test.cc
// The CPU parity sweep between the two tiers: seeded random configurations of
// every op the oneDNN tier takes (convolution and its transpose, grouped,
// depthwise, strided, dilated; batch norm in training and eval, with its ReLU
// and residual; max and average pooling with ceil_mode and padding; the
// activation rows; softmax; linear), NCHW and channels-last, run in float32 on
// the reference kernels and on oneDNN, comparing the output and every
// gradient. A case is reproducible by number: LOOM_TIER_CASE=k runs case k.
// A second sweep does the batched matmuls of attention on its permuted views.
//
// N batch, C channels, H, W input, K out channels, R, S filter; M rows, In, Out features;
// H heads in the batched matmuls.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_backend.h"
#include "core/onednn/plan.h"
#include "core/onednn/tier.h"
#include "core/ops/ops.h"
#include "tests/core/ops/parity_sweep.h"

namespace loom {
namespace {

constexpr int64_t kCases = 240;
// float32 against float32: the tiers sum in different orders, nothing else.
constexpr double kTolerance = 1e-4;

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  int64_t between(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin() { return between(0, 1) == 1; }

 private:
  std::mt19937_64 rng_;
};

// One configuration: a name with every setting, its inputs (float32 leaves),
// the op, which returns its output, and whether oneDNN must run it: some
// configurations are the reference kernels' by design (batch norm and pooling
// on NCHW, where they are faster, one channel being NCHW too; average pooling with count_include_pad where
// ceil_mode adds a window oneDNN divides otherwise; a transposed convolution
// whose output_padding no window reaches; softmax over an axis that is not
// innermost in memory, where oneDNN 2.6 has only its reference implementation,
// or of one element).
struct Case {
  std::string description;
  std::vector<Tensor> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> op;
  std::string family;
  bool onednn_expected = true;
};

Tensor leaf(const Shape& sizes, Generator& gen, bool channels_last, double offset = 0) {
  Tensor t = randn(sizes, {}, &gen) + offset;
  if (channels_last && sizes.size() == 4) t = t.contiguous(MemoryFormat::ChannelsLast);
  return t.detach().requires_grad_();
}

Case conv_case(Draw& d, Generator& gen, bool cl) {
  const int64_t kind = d.between(0, 3);  // 0-1: groups 1, 2: 2 groups, 3: depthwise
  const int64_t g = kind <= 1 ? 1 : kind == 2 ? 2 : d.between(2, 24);
  const int64_t c = g * d.between(1, kind == 3 ? 1 : 12), k = g * d.between(1, kind == 3 ? 2 : 12);
  const int64_t r = d.between(1, 5), s = d.between(1, 5), sh = d.between(1, 3), sw = d.between(1, 3);
  const int64_t dh = d.between(1, 2), dw = d.between(1, 2);
  const int64_t h = std::max<int64_t>(d.between(3, 18), dh * (r - 1) + 1);
  const int64_t w = std::max<int64_t>(d.between(3, 18), dw * (s - 1) + 1);
  const int64_t n = d.between(1, 4);
  const bool bias = d.coin(), transposed = d.coin();
  // A transposed convolution's padding trims its output: at most half the dilated filter.
  const int64_t ph = std::min(d.between(0, 2), transposed ? dh * (r - 1) / 2 : 2);
  const int64_t pw = std::min(d.between(0, 2), transposed ? dw * (s - 1) / 2 : 2);
  Case out{fmt::format("{} N={} C={} K={} groups={} {}x{} stride={}x{} dilation={}x{} pad={}x{} "
                       "H={} W={} bias={}", transposed ? "conv_transpose2d" : "conv2d", n, c, k, g, r, s, sh,
                       sw, dh, dw, ph, pw, h, w, bias),
           {}, {}, transposed ? "conv_transpose2d" : "conv2d", !transposed};
  if (transposed) {
    // weight (C, K/G, R, S); output_padding below the larger of stride and dilation.
    const int64_t oph = d.between(0, std::max(sh, dh) - 1), opw = d.between(0, std::max(sw, dw) - 1);
    out.description += fmt::format(" output_padding={}x{}", oph, opw);
    out.inputs = {leaf({n, c, h, w}, gen, cl), leaf({c, k / g, r, s}, gen, cl && d.coin())};
    if (bias) out.inputs.push_back(leaf({k}, gen, false));
    const ConvTranspose2dOptions o{.stride = {sh, sw}, .padding = {ph, pw}, .output_padding = {oph, opw},
                                   .dilation = {dh, dw}, .groups = g};
    out.op = [o, bias](const std::vector<Tensor>& t) {
      return conv_transpose2d(t[0], t[1], bias ? t[2] : Tensor(), o);
    };
    return out;
  }
  out.inputs = {leaf({n, c, h, w}, gen, cl), leaf({k, c / g, r, s}, gen, cl && d.coin())};
  if (bias) out.inputs.push_back(leaf({k}, gen, false));
  const Conv2dOptions o{.stride = {sh, sw}, .padding = {ph, pw}, .dilation = {dh, dw}, .groups = g};
  out.op = [o, bias](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], bias ? t[2] : Tensor(), o); };
  return out;
}

Case norm_case(Draw& d, Generator& gen, bool cl) {
  const int64_t n = d.between(1, 6), c = d.between(1, 40), h = d.between(1, 12), w = d.between(1, 12);
  const bool spatial = d.coin(), affine = d.coin();
  // 0: training, 1: eval, 2: bn + activation, 3: bn + residual + activation (any row, ReLU one in two)
  const int64_t variant = d.between(0, 3);
  const int64_t rows = static_cast<int64_t>(std::size(kernel::kActivationKinds));
  const ActivationKind kind = d.coin() ? ActivationKind::Relu : kernel::kActivationKinds[d.between(0, rows - 1)];
  const std::string act = kernel::activation_info(kind).name;
  const Shape sizes = spatial ? Shape{std::max<int64_t>(n, 2), c, h, w} : Shape{n + 3, c};
  Case out{fmt::format("batch_norm {} sizes={} affine={}",
                       variant == 0 ? "training" : variant == 1 ? "eval" : variant == 2 ? "+" + act : "+residual+" + act,
                       shape_str(sizes), affine),
           {leaf(sizes, gen, cl)}, {}, variant <= 1 ? "batch_norm" : "batch_norm_activation",
           !spatial || (cl && c > 1)};
  if (affine) {
    out.inputs.push_back(leaf({c}, gen, false, 1.0));
    out.inputs.push_back(leaf({c}, gen, false));
  }
  if (variant == 3) out.inputs.push_back(leaf(sizes, gen, cl));
  const Tensor running_mean = randn({c}, {}, &gen), running_var = rand({c}, {}, &gen) + 0.5;
  out.op = [=](const std::vector<Tensor>& t) {
    const Tensor weight = affine ? t[1] : Tensor(), bias = affine ? t[2] : Tensor();
    const Tensor rm = running_mean.clone(), rv = running_var.clone();  // each tier blends its own
    if (variant <= 1) return batch_norm(t[0], rm, rv, weight, bias, {.training = variant == 0});
    return batch_norm_activation(t[0], rm, rv, weight, bias, {}, kind, {}, variant == 3 ? t.back() : Tensor());
  };
  return out;
}

Case pool_case(Draw& d, Generator& gen, bool cl) {
  const int64_t kh = d.between(1, 4), kw = d.between(1, 4), sh = d.between(1, 3), sw = d.between(1, 3);
  const int64_t ph = d.between(0, kh / 2), pw = d.between(0, kw / 2);
  const int64_t h = d.between(kh, 16), w = d.between(kw, 16);
  const bool max = d.coin(), ceil = d.coin(), include_pad = d.coin();
  const Shape sizes{d.between(1, 4), d.between(1, 24), h, w};
  Case out{fmt::format("{} sizes={} kernel={}x{} stride={}x{} pad={}x{} ceil_mode={} count_include_pad={}",
                       max ? "max_pool2d" : "avg_pool2d", shape_str(sizes), kh, kw, sh, sw, ph, pw, ceil,
                       include_pad),
           {leaf(sizes, gen, cl)}, {}, max ? "max_pool2d" : "avg_pool2d",
           cl && sizes[1] > 1 && (max || !include_pad)};
  const Pool2dOptions o{.kernel_size = {kh, kw}, .stride = std::array<int64_t, 2>{sh, sw},
                        .padding = {ph, pw}, .ceil_mode = ceil, .count_include_pad = include_pad};
  out.op = [o, max](const std::vector<Tensor>& t) { return max ? max_pool2d(t[0], o) : avg_pool2d(t[0], o); };
  return out;
}

Case activation_case(Draw& d, Generator& gen, bool cl) {
  static constexpr ActivationKind kKinds[] = {ActivationKind::Sigmoid, ActivationKind::Tanh,
                                              ActivationKind::Gelu,    ActivationKind::GeluTanh,
                                              ActivationKind::Silu,    ActivationKind::Elu,
                                              ActivationKind::Mish,    ActivationKind::Hardswish,
                                              ActivationKind::Softplus};
  const ActivationKind kind = kKinds[d.between(0, std::size(kKinds) - 1)];
  const Shape sizes{d.between(1, 4), d.between(1, 16), d.between(1, 12), d.between(1, 12)};
  const std::string name = kernel::activation_info(kind).name;
  Case out{fmt::format("{} sizes={}", name, shape_str(sizes)), {leaf(sizes, gen, cl)}, {}, "activations"};
  out.op = [kind](const std::vector<Tensor>& t) { return activation(t[0] * 2.0, kind); };
  return out;
}

Case softmax_case(Draw& d, Generator& gen, bool cl) {
  const bool spatial = d.coin(), log = d.coin();
  const Shape sizes = spatial ? Shape{d.between(1, 4), d.between(1, 20), d.between(1, 6), d.between(1, 6)}
                              : Shape{d.between(1, 40), d.between(1, 200)};
  const int64_t dim = d.between(0, static_cast<int64_t>(sizes.size()) - 1);
  Case out{fmt::format("{} sizes={} dim={}", log ? "log_softmax" : "softmax", shape_str(sizes), dim),
           {leaf(sizes, gen, cl)}, {}, "softmax", false};
  out.op = [dim, log](const std::vector<Tensor>& t) {
    return log ? log_softmax(t[0] * 3.0, dim) : softmax(t[0] * 3.0, dim);
  };
  return out;
}

Case linear_case(Draw& d, Generator& gen) {
  const int64_t m = d.between(1, 64), in = d.between(1, 96), out_features = d.between(1, 96);
  const bool bias = d.coin();
  Case out{fmt::format("linear M={} In={} Out={} bias={}", m, in, out_features, bias),
           {leaf({m, in}, gen, false), leaf({out_features, in}, gen, false)}, {}, "linear"};
  if (bias) out.inputs.push_back(leaf({out_features}, gen, false));
  out.op = [bias](const std::vector<Tensor>& t) { return linear(t[0], t[1], bias ? t[2] : Tensor()); };
  return out;
}

// One operand of a batched matmul, logical sizes (N, H, R, C), stored as a
// leaf and viewed as the model code views it: 0 plain, 1 transposed, 2 heads
// interleaved with rows (attention's (N, S, H, D) permuted to (N, H, S, D)),
// 3 interleaved and transposed (k^T of such a permute).
struct MatmulOperand {
  Tensor leaf;
  int64_t kind = 0;
  Tensor view(const Tensor& t) const {
    switch (kind) {
      case 1: return t.transpose(-2, -1);
      case 2: return t.permute({0, 2, 1, 3});
      case 3: return t.permute({0, 2, 3, 1});
      default: return t;
    }
  }
};

MatmulOperand matmul_operand(Draw& d, Generator& gen, int64_t n, int64_t h, int64_t r, int64_t c) {
  const int64_t kind = d.between(0, 3);
  const Shape stored = kind == 0 ? Shape{n, h, r, c} : kind == 1 ? Shape{n, h, c, r}
                       : kind == 2 ? Shape{n, r, h, c} : Shape{n, c, h, r};
  return {leaf(stored, gen, false), kind};
}

// The batched products of attention, (N, H, M, K) . (N, H, K, Out), each
// operand in one of the views above; oneDNN runs all of them.
Case batched_matmul_case(Draw& d, Generator& gen) {
  const int64_t n = d.between(1, 4), h = d.between(1, 5), m = d.between(1, 20), k = d.between(1, 24);
  const int64_t out_features = d.between(1, 20);
  const MatmulOperand a = matmul_operand(d, gen, n, h, m, k), b = matmul_operand(d, gen, n, h, k, out_features);
  Case out{fmt::format("matmul N={} H={} M={} K={} Out={} a view {} b view {}", n, h, m, k, out_features, a.kind,
                       b.kind),
           {a.leaf, b.leaf}, {}, "batched_matmul"};
  out.op = [a, b](const std::vector<Tensor>& t) { return matmul(a.view(t[0]), b.view(t[1])); };
  return out;
}

Case make_case(int64_t index) {
  Draw d(0x7153ull * 1000003ull + static_cast<uint64_t>(index) * 7919ull);
  Generator gen(static_cast<uint64_t>(index) + 101);
  const bool cl = d.coin();
  Case c;
  switch (d.between(0, 5)) {
    case 0: c = conv_case(d, gen, cl); break;
    case 1: c = norm_case(d, gen, cl); break;
    case 2: c = pool_case(d, gen, cl); break;
    case 3: c = activation_case(d, gen, cl); break;
    case 4: c = softmax_case(d, gen, cl); break;
    default: c = linear_case(d, gen); break;
  }
  c.description = fmt::format("case {}: {} {}", index, c.description, cl ? "channels-last" : "NCHW");
  return c;
}

// The output and the inputs' gradients (from a fixed random dy), in float64.
std::vector<Tensor> run_on(CpuBackend backend, const Case& c, int64_t index) {
  CpuBackendGuard tier(backend);
  std::vector<Tensor> inputs;
  for (const Tensor& t : c.inputs) inputs.push_back(t.detach().clone().requires_grad_());
  const Tensor y = c.op(inputs);
  Generator gen(static_cast<uint64_t>(index) + 7);
  y.backward(randn(y.sizes(), {}, &gen));
  std::vector<Tensor> out = {y.detach().to(DType::Float64)};
  for (const Tensor& t : inputs) out.push_back(t.grad().to(DType::Float64));
  return out;
}

std::vector<int64_t> case_numbers() {
  if (const char* one = std::getenv("LOOM_TIER_CASE")) return {std::strtoll(one, nullptr, 10)};
  std::vector<int64_t> all(kCases);
  for (int64_t i = 0; i < kCases; ++i) all[i] = i;
  return all;
}

TEST_CASE("random configurations: the oneDNN tier matches the reference kernels") {
  REQUIRE_MESSAGE(onednn::active(), "oneDNN did not load: install libdnnl2 (tools/setup.sh)");
  std::map<std::string, std::pair<int64_t, int64_t>> ran;  // family -> (cases, cases oneDNN ran)
  const bool one_case = case_numbers().size() == 1;
  for (int64_t index : case_numbers()) {
    const Case c = make_case(index);
    CAPTURE(c.description);
    const std::vector<Tensor> reference = run_on(CpuBackend::Reference, c, index);
    const int64_t before = onednn::executions();
    const std::vector<Tensor> fast = run_on(CpuBackend::Onednn, c, index);
    auto& [cases, on_onednn] = ran[c.family];
    const bool ran_on_onednn = onednn::executions() > before;
    ++cases;
    on_onednn += ran_on_onednn;
    if (c.onednn_expected) CHECK(ran_on_onednn);
    REQUIRE(fast.size() == reference.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      CAPTURE(i);  // 0: the output, then each input's gradient
      CHECK(sweep::relative_error(fast[i], reference[i]) <= kTolerance);
    }
  }
  for (const auto& [family, count] : ran) {
    CAPTURE(family);
    MESSAGE(family << ": " << count.second << " of " << count.first << " cases ran on oneDNN");
    if (!one_case) CHECK(count.second > 0);
  }
}

TEST_CASE("random batched matmuls on attention's views: the oneDNN tier matches the reference kernels") {
  REQUIRE_MESSAGE(onednn::active(), "oneDNN did not load: install libdnnl2 (tools/setup.sh)");
  constexpr int64_t kMatmulCases = 48;
  for (int64_t index = 0; index < kMatmulCases; ++index) {
    Draw d(0x34ull * 1000003ull + static_cast<uint64_t>(index) * 7919ull);
    Generator gen(static_cast<uint64_t>(index) + 3401);
    const Case c = batched_matmul_case(d, gen);
    CAPTURE(c.description);
    const std::vector<Tensor> reference = run_on(CpuBackend::Reference, c, index);
    const int64_t before = onednn::executions();
    const std::vector<Tensor> fast = run_on(CpuBackend::Onednn, c, index);
    CHECK(onednn::executions() > before);
    REQUIRE(fast.size() == reference.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      CAPTURE(i);  // 0: the output, then each input's gradient
      CHECK(sweep::relative_error(fast[i], reference[i]) <= kTolerance);
    }
  }
}

// Channels-last data gradients with a multiple of 512 output channels on maps
// of 24x24 and more run in the blocked layout, reordered in and out
// (core/onednn/conv.cc: dgrad_runs_blocked); the random sweep's channel counts
// never reach them.
TEST_CASE("random channels-last convolutions whose data gradient runs blocked match the reference kernels") {
  REQUIRE_MESSAGE(onednn::active(), "oneDNN did not load: install libdnnl2 (tools/setup.sh)");
  constexpr int64_t kBlockedCases = 6;
  for (int64_t index = 0; index < kBlockedCases; ++index) {
    Draw d(0x5120ull + static_cast<uint64_t>(index) * 7919ull);
    Generator gen(static_cast<uint64_t>(index) + 512);
    const int64_t c = d.between(1, 4), k = 512 * d.between(1, 2), h = d.between(26, 30), w = d.between(26, 30);
    const int64_t pad = d.between(0, 1);
    Case one{fmt::format("conv2d N=1 C={} K={} H={} W={} 3x3 padding={} channels-last", c, k, h, w, pad),
             {leaf({1, c, h, w}, gen, true), leaf({k, c, 3, 3}, gen, true)}, {}, "conv2d"};
    one.op = [pad](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], Tensor(), {.padding = pad}); };
    CAPTURE(one.description);
    const std::vector<Tensor> reference = run_on(CpuBackend::Reference, one, index);
    const int64_t before = onednn::executions();
    const std::vector<Tensor> fast = run_on(CpuBackend::Onednn, one, index);
    CHECK(onednn::executions() >= before + 3);  // forward, data and weight gradients
    REQUIRE(fast.size() == reference.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      CAPTURE(i);  // 0: the output, then x's and the weight's gradients
      CHECK(sweep::relative_error(fast[i], reference[i]) <= kTolerance);
    }
  }
}

}  // namespace
}  // namespace loom
