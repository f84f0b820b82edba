// File: tests/core/ops/attention_gpu_test.cc
// scaled_dot_product_attention on the GPU against the CPU in float64: random
// configurations inside and outside what the fused kernels take (3-d and 4-d,
// dense and heads permuted out of a packed projection), float64, strict float32,
// bfloat16 and float16, plain, with a Bool or added mask, or causal; y's memory
// layout; the same bits run to run; a captured forward and backward replaying
// what the eager ones computed; and dropout drawn as loom::dropout draws it.
//
// L query rows, S key rows, E the query/key width, F the value width.
#include <doctest/doctest.h>

#include <random>

#include "core/cuda/capture.h"
#include "core/cuda/graph.h"
#include "core/kernel/attention.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Case {
  int64_t n, heads, L, S, E, F;
  bool packed;  // q, k, v are views into one (N, L, 3 H E) projection (then S = L, F = E)
};

Case random_case(std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Case c{.n = pick(1, 5), .heads = pick(0, 4), .L = pick(1, 70), .S = pick(1, 70), .E = pick(1, 72),
         .F = pick(1, 72), .packed = pick(0, 2) == 0};
  if (c.packed) {
    c.heads = std::max<int64_t>(c.heads, 1);
    c.S = c.L;
    c.F = c.E;
  }
  return c;
}

Shape dims(const Case& c, int64_t rows, int64_t width) {
  return c.heads == 0 ? Shape{c.n, rows, width} : Shape{c.n, c.heads, rows, width};
}

// Float64 leaves q, k, v for the case on the CPU (values only: the layout is made per device).
std::vector<Tensor> leaves(const Case& c, Generator& gen) {
  const TensorOptions o = {.dtype = DType::Float64};
  return {randn(dims(c, c.L, c.E), o, &gen), randn(dims(c, c.S, c.E), o, &gen), randn(dims(c, c.S, c.F), o, &gen)};
}

// The operands as the op sees them on `device` in `dtype`: dense, or (packed)
// (N, H, L, E) views permuted out of one (N, L, 3 H E) tensor, as attention's heads are.
std::vector<Tensor> operands(const Case& c, const std::vector<Tensor>& values, DType dtype, Device device) {
  std::vector<Tensor> out;
  if (!c.packed || c.heads == 0) {
    for (const Tensor& t : values) out.push_back(t.to(device).to(dtype).detach().requires_grad_(true));
    return out;
  }
  std::vector<Tensor> rows;  // each (N, L, H E)
  for (const Tensor& t : values) rows.push_back(t.permute({0, 2, 1, 3}).reshape({c.n, c.L, c.heads * c.E}));
  const Tensor packed = cat(rows, 2).to(device).to(dtype).detach().requires_grad_(true);
  for (int64_t part = 0; part < 3; ++part) {
    out.push_back(packed.narrow(2, part * c.heads * c.E, c.heads * c.E)
                      .reshape({c.n, c.L, c.heads, c.E})
                      .permute({0, 2, 1, 3}));
  }
  out.push_back(packed);  // the leaf, whose gradient holds all three
  return out;
}

struct Result {
  Tensor y;
  std::vector<Tensor> grads;  // the leaves' gradients
};

Result run(const Case& c, const std::vector<Tensor>& values, const Tensor& dy, DType dtype, Device device) {
  std::vector<Tensor> in = operands(c, values, dtype, device);
  Result r{.y = scaled_dot_product_attention(in[0], in[1], in[2])};
  r.y.backward(dy.to(device).to(dtype));
  if (in.size() == 4) {
    r.grads = {in[3].grad()};
  } else {
    for (size_t i = 0; i < 3; ++i) r.grads.push_back(in[i].grad());
  }
  return r;
}

bool fused(const Case& c, DType dtype) {
  return kernel::attention_fits({.L = c.L, .S = c.S, .E = c.E, .F = c.F}, dtype == DType::Float64);
}

void check_case(const Case& c, DType dtype, double tol, Generator& gen) {
  const std::vector<Tensor> values = leaves(c, gen);
  const Tensor dy = randn(dims(c, c.L, c.F), {.dtype = DType::Float64}, &gen);
  // The reference sees the same rounding of the operands to dtype as the GPU.
  std::vector<Tensor> rounded;
  for (const Tensor& t : values) rounded.push_back(t.to(dtype).to(DType::Float64));
  const Result expected = run(c, rounded, dy.to(dtype).to(DType::Float64), DType::Float64, Device::cpu());
  const Result actual = run(c, values, dy, dtype, testing::test_gpu());
  CHECK(actual.y.dtype() == dtype);
  CHECK(testing::normalized_error(actual.y.cpu(), expected.y) <= tol);
  for (size_t i = 0; i < expected.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(testing::normalized_error(actual.grads[i].cpu(), expected.grads[i]) <= 2 * tol);
  }
}

LOOM_GPU_TEST_CASE("scaled_dot_product_attention matches the CPU on random configurations, every dtype") {
  std::mt19937 rng(81);
  Generator gen(81);
  NumericsGuard strict({.precision = Precision::StrictFp32});  // the unfused cases' matmuls in IEEE fp32
  struct Tol {
    DType dtype;
    double tol;
  };
  const Tol tolerances[] = {{DType::Float64, 1e-12}, {DType::Float32, 1e-5}, {DType::BFloat16, 2e-2},
                            {DType::Float16, 4e-3}};
  int fused_cases = 0, unfused_cases = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const Case c = random_case(rng);
    for (const Tol& t : tolerances) {
      CAPTURE(trial);
      CAPTURE(dtype_name(t.dtype));
      CAPTURE(shape_str({c.n, c.heads, c.L, c.S, c.E, c.F, c.packed}));
      check_case(c, t.dtype, t.tol, gen);
      (fused(c, t.dtype) ? fused_cases : unfused_cases) += 1;
    }
  }
  // The random shapes cover both paths.
  CHECK(fused_cases >= 40);
  CHECK(unfused_cases >= 10);
}

LOOM_GPU_TEST_CASE("scaled_dot_product_attention's fused y is laid out (N, L, H, F) and repeats its bits") {
  Generator gen(82);
  const TensorOptions o = {.device = testing::test_gpu()};
  const Tensor q = randn({4, 3, 17, 16}, o, &gen), k = randn({4, 3, 17, 16}, o, &gen),
               v = randn({4, 3, 17, 8}, o, &gen);
  const Tensor y = scaled_dot_product_attention(q, k, v);
  CHECK(y.sizes() == Shape{4, 3, 17, 8});
  CHECK(y.transpose(1, 2).is_contiguous());
  CHECK_CLOSE(y.cpu(), scaled_dot_product_attention(q, k, v).cpu(), 0, 0);
}

LOOM_GPU_TEST_CASE("a captured scaled_dot_product_attention replays the eager forward and backward") {
  Generator gen(83);
  const TensorOptions o = {.dtype = DType::BFloat16, .device = testing::test_gpu()};
  Tensor q = randn({8, 4, 17, 16}, o, &gen).requires_grad_(true);
  Tensor k = randn({8, 4, 17, 16}, o, &gen).requires_grad_(true);
  Tensor v = randn({8, 4, 17, 16}, o, &gen).requires_grad_(true);
  auto step = [&] {
    Tensor y = scaled_dot_product_attention(q, k, v);
    y.backward(ones_like(y));
    return y;
  };
  const Tensor eager_y = step().detach().clone();
  const Tensor eager_dq = q.grad().clone();
  for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());  // the captured backward makes them anew
  cuda::synchronize();
  cuda::CudaGraph graph;
  Tensor captured;
  graph.capture([&] { captured = step(); });
  graph.replay();
  CHECK_CLOSE(captured.cpu(), eager_y.cpu(), 0, 0);
  CHECK_CLOSE(q.grad().cpu(), eager_dq.cpu(), 0, 0);
}

// q, k, v leaves and a mask of kind `kind` (0 Bool, 1 added, 2 causal) on the
// CPU in float64; the CPU's masked attention there against the GPU's in dtype.
void check_masked(const Case& c, int kind, DType dtype, double tol, Generator& gen) {
  const std::vector<Tensor> values = leaves(c, gen);
  const Tensor dy = randn(dims(c, c.L, c.F), {.dtype = DType::Float64}, &gen);
  const Tensor u = rand({c.L, c.S}, {.dtype = DType::Float64}, &gen);
  const Tensor mask = kind == 0   ? u > 0.3
                      : kind == 1 ? masked_fill(randn({c.L, c.S}, {.dtype = DType::Float64}, &gen), u < 0.2, -INFINITY)
                                  : Tensor();
  auto run_masked = [&](Device device, DType type, bool round) {
    std::vector<Tensor> in;
    for (const Tensor& t : values) {
      const Tensor r = round ? t.to(dtype).to(DType::Float64) : t;
      in.push_back(r.to(device).to(type).detach().requires_grad_(true));
    }
    const Tensor m = !mask.defined() || mask.dtype() == DType::Bool ? mask : mask.to(type);
    Result r{.y = scaled_dot_product_attention(in[0], in[1], in[2],
                                               {.attn_mask = m.defined() ? m.to(device) : m, .is_causal = kind == 2})};
    r.y.backward((round ? dy.to(dtype).to(DType::Float64) : dy).to(device).to(type));
    for (const Tensor& t : in) r.grads.push_back(t.grad());
    return r;
  };
  const Result expected = run_masked(Device::cpu(), DType::Float64, true);
  const Result actual = run_masked(testing::test_gpu(), dtype, false);
  CHECK(actual.y.dtype() == dtype);
  CHECK(testing::normalized_error(actual.y.cpu(), expected.y) <= tol);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(testing::normalized_error(actual.grads[i].cpu(), expected.grads[i]) <= 2 * tol);
  }
}

LOOM_GPU_TEST_CASE("masked and causal attention match the CPU on random configurations, every dtype") {
  std::mt19937 rng(84);
  Generator gen(84);
  NumericsGuard strict({.precision = Precision::StrictFp32});
  const std::pair<DType, double> tolerances[] = {
      {DType::Float64, 1e-12}, {DType::Float32, 1e-5}, {DType::BFloat16, 2e-2}, {DType::Float16, 4e-3}};
  int causal_fused = 0, causal_unfused = 0;
  for (int trial = 0; trial < 24; ++trial) {
    Case c = random_case(rng);
    c.packed = false;
    if (trial % 6 == 5) c.L = c.S = 120;  // two 120 x 121 score tiles outgrow a block: the composed path
    for (const auto& [dtype, tol] : tolerances) {
      CAPTURE(trial);
      CAPTURE(dtype_name(dtype));
      CAPTURE(shape_str({c.n, c.heads, c.L, c.S, c.E, c.F}));
      check_masked(c, trial % 3, dtype, tol, gen);
      if (trial % 3 == 2) (fused(c, dtype) ? causal_fused : causal_unfused) += 1;
    }
  }
  // Causal attention runs in the fused kernels where they fit, and composed elsewhere.
  CHECK(causal_fused >= 4);
  CHECK(causal_unfused >= 4);
}

LOOM_GPU_TEST_CASE("attention dropout on the GPU drops the weights as loom::dropout does") {
  Generator gen(85);
  const TensorOptions o = {.device = testing::test_gpu()};
  const Tensor q = randn({2, 3, 9, 8}, o, &gen), k = randn({2, 3, 11, 8}, o, &gen), v = randn({2, 3, 11, 4}, o, &gen);
  Generator a(5), b(5);
  const Tensor y = scaled_dot_product_attention(q, k, v, {.dropout_p = 0.25, .is_causal = true, .generator = &a});
  const Tensor w = dropout(attention_weights(q, k, {.is_causal = true}), 0.25, true, &b);
  CHECK_CLOSE(y.cpu(), matmul(w, v).cpu(), 0, 0);
}

}  // namespace
}  // namespace loom
