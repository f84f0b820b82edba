// File: tests/core/ops/sort_gpu_test.cc
// sort / argsort / topk / kthvalue / median, cumsum / cumprod and prod on the
// GPU against the CPU: random shapes, dims, dtypes (the 16-bit floats
// included, with many ties) and layouts, long rows and many short ones (CUB's
// two segment paths), zeros in products, gradients, and replays of a CUDA
// graph that captured them. Positions must match exactly; so must the sorted
// values and integer running sums and products.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

std::vector<int64_t> as_ints(const Tensor& t) { return t.cpu().contiguous().to_vector<int64_t>(); }

// The same shape and values, NaN matching NaN: a median or k-th value is NaN
// wherever a NaN ranks there, on both devices.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const std::vector<double> x = testing::values(a), y = testing::values(b);
  return std::equal(x.begin(), x.end(), y.begin(),
                    [](double p, double q) { return p == q || (std::isnan(p) && std::isnan(q)); });
}

// x's values on the CPU in a dtype the CPU computes (16-bit floats widen
// exactly to float32).
Tensor cpu_twin(const Tensor& x) {
  const bool half = x.dtype() == DType::BFloat16 || x.dtype() == DType::Float16;
  return half ? x.to(DType::Float32).cpu() : x.cpu();
}

// A random tensor of `dtype` on the GPU with few distinct values (ties) or
// normal ones, possibly channels-last or transposed.
Tensor random_input(std::mt19937_64& rng, Generator& gen, const Shape& sizes, DType dtype) {
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Tensor x = between(0, 1) ? randint(0, between(2, 30), sizes, {.dtype = DType::Float64}, &gen)
                           : randn(sizes, {.dtype = DType::Float64}, &gen);
  if (dtype == DType::UInt8 || dtype == DType::Bool) x = abs(x);
  x = x.to(dtype).to(testing::test_gpu());
  if (x.dim() == 4 && between(0, 1)) return x.contiguous(MemoryFormat::ChannelsLast);
  if (x.dim() >= 2 && between(0, 1)) return x.transpose(0, x.dim() - 1);
  return x;
}

}  // namespace

LOOM_GPU_TEST_CASE("sort, argsort and topk give the CPU's positions and values on random configurations") {
  std::mt19937_64 rng(1204);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Generator gen(1204);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16,
                          DType::Int32,   DType::Int64,   DType::UInt8,    DType::Bool};
  for (int trial = 0; trial < 160; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, 12);
    const DType dtype = dtypes[trial % 8];
    const Tensor x = random_input(rng, gen, sizes, dtype);
    const int64_t dim = between(-x.dim(), x.dim() - 1);
    const bool descending = between(0, 1) == 1;
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(descending);
    CAPTURE(dtype_name(dtype));
    const ValuesIndices gpu = sort(x, dim, descending), cpu = sort(cpu_twin(x), dim, descending);
    REQUIRE(gpu.indices.device() == testing::test_gpu());
    CHECK(gpu.values.dtype() == dtype);
    REQUIRE(as_ints(gpu.indices) == as_ints(cpu.indices));
    CHECK_CLOSE(cpu_twin(gpu.values).to(DType::Float64), cpu.values.to(DType::Float64), 0, 0);
    const int64_t k = between(0, x.size(dim));
    const ValuesIndices top = topk(x, k, dim, descending);
    CHECK(as_ints(top.indices) == as_ints(cpu.indices.narrow(dim, 0, k)));
    CHECK(as_ints(argsort(x, dim, descending)) == as_ints(cpu.indices));
  }
}

LOOM_GPU_TEST_CASE("long rows and many short rows sort as on the CPU") {
  Generator gen(77);
  const Device gpu = testing::test_gpu();
  for (const Shape& sizes : {Shape{2, 150000}, Shape{20000, 3}, Shape{512, 1000}, Shape{1, 1 << 20}}) {
    CAPTURE(shape_str(sizes));
    const Tensor x = randint(0, 5000, sizes, {.dtype = DType::Float32}, &gen).to(gpu);  // many ties
    for (bool descending : {false, true}) {
      CAPTURE(descending);
      CHECK(as_ints(argsort(x, 1, descending)) == as_ints(argsort(x.cpu(), 1, descending)));
    }
    const int64_t k = std::min<int64_t>(5, sizes[1]);
    CHECK(as_ints(topk(x, k).indices) == as_ints(topk(x.cpu(), k).indices));
  }
}

LOOM_GPU_TEST_CASE("sort and topk gradients match the CPU's") {
  Generator gen(78);
  const Tensor base = randn({6, 5, 4, 3}, {}, &gen);
  for (int64_t dim : {0, 1, 3}) {
    CAPTURE(dim);
    Tensor xc = base.clone().requires_grad_(true);
    Tensor xg = base.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast).requires_grad_(true);
    const Tensor dy = randn(base.sizes(), {}, &gen);
    sort(xc, dim, true).values.backward(dy);
    sort(xg, dim, true).values.backward(dy.to(testing::test_gpu()));
    CHECK_CLOSE(xg.grad().cpu(), xc.grad(), 0, 0);
    Tensor tc = base.clone().requires_grad_(true), tg = base.to(testing::test_gpu()).requires_grad_(true);
    const Tensor dtop = randn(topk(base, 2, dim).values.sizes(), {}, &gen);
    topk(tc, 2, dim).values.backward(dtop);
    topk(tg, 2, dim).values.backward(dtop.to(testing::test_gpu()));
    CHECK_CLOSE(tg.grad().cpu(), tc.grad(), 0, 0);
  }
}

LOOM_GPU_TEST_CASE("cumsum matches the CPU on random shapes, dims, dtypes and layouts, forward and backward") {
  std::mt19937_64 rng(1205);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Generator gen(1205);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Int32, DType::Int64,
                          DType::UInt8,   DType::Bool};
  for (int trial = 0; trial < 140; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, trial % 10 == 0 ? 300 : 40);
    const DType dtype = dtypes[trial % 7];
    const Tensor x = random_input(rng, gen, sizes, dtype);
    const int64_t dim = between(-x.dim(), x.dim() - 1);
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(dtype_name(dtype));
    const Tensor gpu = cumsum(x, dim);
    if (!is_floating(dtype)) {
      CHECK(gpu.dtype() == DType::Int64);
      CHECK(gpu.cpu().to_vector<int64_t>() == cumsum(x.cpu(), dim).to_vector<int64_t>());
      continue;
    }
    // Against float64 on the CPU; bfloat16 rounds every partial sum to 8 bits.
    const Tensor ref = cumsum(x.to(DType::Float64).cpu(), dim);
    const double tol = dtype == DType::BFloat16 ? 2e-2 : dtype == DType::Float32 ? 1e-5 : 1e-12;
    CHECK(testing::normalized_error(gpu.to(DType::Float64).cpu(), ref) <= tol);
  }
  for (int64_t dim : {0, 2, 3}) {
    CAPTURE(dim);
    const Tensor base = randn({3, 4, 5, 70}, {.dtype = DType::Float64}, &gen);
    Tensor xc = base.clone().requires_grad_(true);
    Tensor xg = base.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast).requires_grad_(true);
    const Tensor dy = randn(base.sizes(), {.dtype = DType::Float64}, &gen);
    cumsum(xc, dim).backward(dy);
    cumsum(xg, dim).backward(dy.to(testing::test_gpu()));
    CHECK(testing::normalized_error(xg.grad().cpu(), xc.grad()) <= 1e-12);
  }
  const Tensor bytes = tensor({200, 100, 7}, {3}, {.dtype = DType::UInt8, .device = testing::test_gpu()});
  CHECK(cumsum(bytes, 0, DType::UInt8).cpu().to_vector<int64_t>() == std::vector<int64_t>{200, 44, 51});
}

// Factors near 1 in magnitude (so long products stay finite), either sign, a
// sixth of them exactly 0; integers in [-2, 2].
Tensor random_factors(Generator& gen, const Shape& sizes, DType dtype) {
  if (!is_floating(dtype)) return randint(-2, 3, sizes, {.dtype = DType::Float64}, &gen).to(dtype);
  Tensor x = rand(sizes, {.dtype = DType::Float64}, &gen) * 0.4 + 0.8;
  x = where(lt(rand(sizes, {.dtype = DType::Float64}, &gen), 0.5), x, -x);
  return masked_fill(x, lt(rand(sizes, {.dtype = DType::Float64}, &gen), 1.0 / 6), 0.0).to(dtype);
}

LOOM_GPU_TEST_CASE("cumprod and prod match the CPU on random shapes, dims, dtypes, zeros and layouts") {
  std::mt19937_64 rng(1206);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Generator gen(1206);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8};
  for (int trial = 0; trial < 120; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, 40);
    if (trial % 10 == 0) sizes[between(0, std::ssize(sizes) - 1)] = between(100, 300);  // one long dim
    const DType dtype = dtypes[trial % 6];
    Tensor x = random_factors(gen, sizes, dtype).to(testing::test_gpu());
    if (x.dim() == 4 && between(0, 1)) x = x.contiguous(MemoryFormat::ChannelsLast);
    if (x.dim() >= 2 && between(0, 1)) x = x.transpose(0, x.dim() - 1);
    const int64_t dim = between(-x.dim(), x.dim() - 1);
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(dtype_name(dtype));
    if (!is_floating(dtype)) {  // integers exactly, wrapping in their own dtype too
      CHECK(as_ints(cumprod(x, dim)) == as_ints(cumprod(x.cpu(), dim)));
      CHECK(as_ints(cumprod(x, dim, dtype).to(DType::Int64)) == as_ints(cumprod(x.cpu(), dim, dtype).to(DType::Int64)));
      // prod multiplies integers in float64 (reduction.cc), exactly in every order
      // where the product of the factors' magnitudes (zeros as ones) stays below 2^53.
      const Tensor wide = x.cpu().to(DType::Float64), squares = mul(wide, wide);
      const std::vector<double> bound = prod(masked_fill(squares, lt(squares, 0.5), 1.0), dim).to_vector<double>();
      const std::vector<int64_t> on_gpu = as_ints(prod(x, dim)), on_cpu = as_ints(prod(x.cpu(), dim));
      for (size_t i = 0; i < bound.size(); ++i) {
        if (bound[i] < 0x1p106) CHECK(on_gpu[i] == on_cpu[i]);
      }
      continue;
    }
    const Tensor wide = x.to(DType::Float64).cpu();
    const double tol = dtype == DType::BFloat16 ? 2e-2 : dtype == DType::Float32 ? 1e-5 : 1e-12;
    CHECK(testing::normalized_error(cumprod(x, dim).to(DType::Float64).cpu(), cumprod(wide, dim)) <= tol);
    CHECK(testing::normalized_error(prod(x, dim, true).to(DType::Float64).cpu(), prod(wide, dim, true)) <= tol);
    CHECK(std::abs(prod(x).to(DType::Float64).item() - prod(wide).item()) <= tol * (1 + std::abs(prod(wide).item())));
  }
  for (int64_t dim : {0, 2, 3}) {
    CAPTURE(dim);
    const Tensor base = random_factors(gen, {3, 4, 5, 70}, DType::Float64);
    const Tensor dy = randn(base.sizes(), {.dtype = DType::Float64}, &gen);
    Tensor xc = base.clone().requires_grad_(true);
    Tensor xg = base.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast).requires_grad_(true);
    cumprod(xc, dim).backward(dy);
    cumprod(xg, dim).backward(dy.to(testing::test_gpu()));
    CHECK(testing::normalized_error(xg.grad().cpu(), xc.grad()) <= 1e-12);
    Tensor pc = base.clone().requires_grad_(true), pg = base.to(testing::test_gpu()).requires_grad_(true);
    const Tensor dp = randn(prod(base, dim).sizes(), {.dtype = DType::Float64}, &gen);
    prod(pc, dim).backward(dp);
    prod(pg, dim).backward(dp.to(testing::test_gpu()));
    CHECK(testing::normalized_error(pg.grad().cpu(), pc.grad()) <= 1e-12);
  }
}

LOOM_GPU_TEST_CASE("kthvalue, median and nanmedian match the CPU exactly") {
  std::mt19937_64 rng(1207);
  auto between = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Generator gen(1207);
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::BFloat16, DType::Int32, DType::UInt8};
  for (int trial = 0; trial < 80; ++trial) {
    Shape sizes(between(1, 4));
    for (int64_t& s : sizes) s = between(1, 30);
    if (trial % 10 == 0) sizes[between(0, std::ssize(sizes) - 1)] = between(100, 300);  // one long dim
    const DType dtype = dtypes[trial % 5];
    Tensor x = random_input(rng, gen, sizes, dtype);
    if (is_floating(dtype) && between(0, 1)) x = masked_fill(x, gt(x, 1.0), std::numeric_limits<double>::quiet_NaN());
    const int64_t dim = between(-x.dim(), x.dim() - 1);
    const int64_t k = between(1, x.size(dim));
    const bool keepdim = between(0, 1) == 1;
    CAPTURE(trial);
    CAPTURE(shape_str(x.sizes()));
    CAPTURE(dim);
    CAPTURE(dtype_name(dtype));
    const Tensor host = cpu_twin(x);
    const std::pair<ValuesIndices, ValuesIndices> pairs[] = {
        {kthvalue(x, k, dim, keepdim), kthvalue(host, k, dim, keepdim)},
        {median(x, dim, keepdim), median(host, dim, keepdim)},
        {nanmedian(x, dim, keepdim), nanmedian(host, dim, keepdim)}};
    for (const auto& [gpu, cpu] : pairs) {
      CHECK(as_ints(gpu.indices) == as_ints(cpu.indices));
      CHECK(same_values(gpu.values, cpu.values));
    }
    CHECK(same_values(median(x), median(host)));
    CHECK(same_values(nanmedian(x), nanmedian(host)));
  }
  const Tensor base = randn({6, 7, 9}, {.dtype = DType::Float64}, &gen);
  Tensor xc = base.clone().requires_grad_(true), xg = base.to(testing::test_gpu()).requires_grad_(true);
  const Tensor dy = randn({6, 9}, {.dtype = DType::Float64}, &gen);
  median(xc, 1).values.backward(dy);
  median(xg, 1).values.backward(dy.to(testing::test_gpu()));
  CHECK_CLOSE(xg.grad().cpu(), xc.grad(), 0, 0);
}

LOOM_GPU_TEST_CASE("sort, topk, median, cumsum, cumprod, prod, any and isnan replay inside a CUDA graph") {
  Generator gen(79);
  const Device gpu = testing::test_gpu();
  Tensor scores = randn({64, 100}, {}, &gen).to(gpu);
  auto work = [&] {
    const Tensor factors = tanh(scores) * 0.25 + 1.0;
    return std::vector<Tensor>{topk(scores, 5).indices,        sort(scores, 0).values,
                               cumsum(scores, 1),              median(scores, 1).indices,
                               cumprod(factors, 1),            prod(factors, 0),
                               any(gt(scores, 2.5), 1),        nan_to_num(log(scores)) + isnan(log(scores))};
  };
  work();
  cuda::synchronize();
  cuda::CudaGraph graph;
  std::vector<Tensor> captured;
  graph.capture([&] { captured = work(); });
  for (int replay = 0; replay < 2; ++replay) {
    scores.copy_(randn({64, 100}, {}, &gen));
    graph.replay();
    const Tensor host = scores.cpu(), factors = tanh(host) * 0.25 + 1.0;
    CHECK(as_ints(captured[0]) == as_ints(topk(host, 5).indices));
    CHECK_CLOSE(captured[1].cpu(), sort(host, 0).values, 0, 0);
    CHECK(testing::normalized_error(captured[2].cpu(), cumsum(host, 1)) <= 1e-5);
    CHECK(as_ints(captured[3]) == as_ints(median(host, 1).indices));
    CHECK(testing::normalized_error(captured[4].cpu(), cumprod(factors, 1)) <= 1e-5);
    CHECK(testing::normalized_error(captured[5].cpu(), prod(factors, 0)) <= 1e-5);
    CHECK(as_ints(captured[6].to(DType::Int64)) == as_ints(any(gt(host, 2.5), 1).to(DType::Int64)));
    CHECK(testing::normalized_error(captured[7].cpu(), nan_to_num(log(host)) + isnan(log(host))) <= 1e-5);
  }
}
