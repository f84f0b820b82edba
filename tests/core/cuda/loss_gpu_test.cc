// File: tests/core/cuda/loss_gpu_test.cc
// The fused GPU cross-entropy and NLL kernels against the CPU reference kernels
// on the same inputs: every reduction (per-position losses, the sum and mean
// totals, and the backward of each), label smoothing, ignore_index, 2-D and 4-D
// scores in dense, transposed, stepped and channels-last layouts, float32 and
// float64; then out-of-range targets, masked logits, empty batches, many
// positions and run-to-run repeatability.
//
// N batch, C classes, H, W spatial dims; a position is one (n, h, w).
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu/loss.h"
#include "core/cuda/loss.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// How scores (and their gradient) sit in GPU memory; the CPU copy is dense.
enum class Layout { Dense, Transposed, Stepped, ChannelsLast };

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Dense: return "dense";
    case Layout::Transposed: return "transposed";
    case Layout::Stepped: return "stepped";
    case Layout::ChannelsLast: return "channels-last";
  }
  return "?";
}

// The sum and mean reductions see dloss as one value repeated (stride 0); mean
// scales it by 1 / count, as core/ops/loss.cc does.
enum class LossReduction { None, Sum, Mean };
constexpr LossReduction kReductions[] = {LossReduction::None, LossReduction::Sum,
                                         LossReduction::Mean};

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dtype) {
  return dtype == DType::Float32 ? Tolerance{1e-5, 1e-6} : Tolerance{1e-11, 1e-12};
}

// A GPU copy of dense `t` (N, C, ...) laid out as asked: Transposed keeps C
// outermost in memory (2-D), Stepped uses every other class of a wider tensor.
Tensor place(const Tensor& t, Layout layout) {
  switch (layout) {
    case Layout::Dense: return t.to(testing::test_gpu());
    case Layout::Transposed: return t.t().contiguous().to(testing::test_gpu()).t();
    case Layout::ChannelsLast: return t.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
    case Layout::Stepped: {
      Shape wide = t.sizes();
      wide[1] *= 2;
      Tensor stored = zeros(wide, {.dtype = t.dtype()});
      stored.slice(1, 0, wide[1], 2).copy_(t);
      return stored.to(testing::test_gpu()).slice(1, 0, wide[1], 2);
    }
  }
  return Tensor();
}

// NaN everywhere, so that an element the kernel does not write is caught.
Tensor poisoned(const Shape& sizes, DType dtype, Layout layout = Layout::Dense) {
  return place(full(sizes, NAN, {.dtype = dtype}), layout);
}

// (N, H, W) from (N, C, H, W).
Shape position_shape(const Shape& scores) {
  Shape sizes = scores;
  sizes.erase(sizes.begin() + 1);
  return sizes;
}

// Classes in [0, C), with every fourth position set to ignore_index.
Tensor random_targets(const Shape& sizes, int64_t classes, int64_t ignore_index, Generator& gen) {
  std::vector<double> values =
      testing::values(randint(0, classes, sizes, {.dtype = DType::Int64}, &gen));
  for (size_t i = 1; i < values.size(); i += 4) values[i] = static_cast<double>(ignore_index);
  return tensor(values, sizes, {.dtype = DType::Int64});
}

// The GPU target: a transposed view for 3-D targets, so that its strides are
// not the dense ones either.
Tensor gpu_target(const Tensor& target) {
  if (target.dim() != 3) return target.to(testing::test_gpu());
  return target.transpose(1, 2).contiguous().to(testing::test_gpu()).transpose(1, 2);
}

struct Config {
  Shape scores;  // (N, C) or (N, C, H, W)
  Layout layout;
  DType dtype;
  double eps;
  int64_t ignore_index;
};

std::vector<Config> configs() {
  // Class counts that take each lane count of a contiguous row: 1 (under 8
  // classes), 8 (8 to 63) and a warp (64 and up); a two-class map with more
  // positions than one block's passes (several blocks, then the totals kernel).
  const std::vector<Shape> flat = {{6, 5}, {9, 10}, {7, 100}, {3, 1}};
  const std::vector<Shape> spatial = {{2, 5, 3, 4}, {2, 21, 3, 3}, {2, 70, 3, 3}, {2, 2, 40, 40}};
  std::vector<Config> out;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (double eps : {0.0, 0.1}) {
      for (int64_t ignore_index : {int64_t{-100}, int64_t{2}}) {
        for (const Shape& s : flat) {
          for (Layout l : {Layout::Dense, Layout::Transposed, Layout::Stepped}) {
            out.push_back({s, l, dtype, eps, ignore_index});
          }
        }
        for (const Shape& s : spatial) {
          for (Layout l : {Layout::Dense, Layout::ChannelsLast, Layout::Stepped}) {
            out.push_back({s, l, dtype, eps, ignore_index});
          }
        }
      }
    }
  }
  return out;
}

// dloss with the target's sizes and the scale a reduction gives it.
struct LossGrad {
  Tensor cpu, gpu;
  double scale = 1.0;
};

LossGrad loss_grad(LossReduction reduction, const Tensor& target, const kernel::LossTotal& total,
                   DType dtype, Generator& gen) {
  if (reduction == LossReduction::None) {
    Tensor dloss = randn(target.sizes(), {.dtype = dtype}, &gen);
    return {dloss, gpu_target(dloss), 1.0};
  }
  Tensor dy = randn({}, {.dtype = dtype}, &gen);
  const double scale = reduction == LossReduction::Mean
                           ? 1.0 / static_cast<double>(std::max<int64_t>(total.count, 1))
                           : 1.0;
  return {dy.expand(target.sizes()), dy.to(testing::test_gpu()).expand(target.sizes()), scale};
}

// The forwards leave their totals (and a reduced loss) in device memory; these
// run one and read them back. `reduced` (optional) receives the mean.
struct DeviceTotals {
  Tensor bytes = empty({static_cast<int64_t>(sizeof(cuda::LossTotals))},
                       {.dtype = DType::UInt8, .device = testing::test_gpu()});
  cuda::LossTotals* get() const { return static_cast<cuda::LossTotals*>(bytes.raw_data()); }
  cuda::LossScale scale(bool mean) const { return {get(), mean}; }
};

kernel::LossTotal cross_entropy_totals(const Tensor& losses, const Tensor& logits, const Tensor& target,
                                    const kernel::CrossEntropyParams& params, const DeviceTotals& totals,
                                    const Tensor& reduced = Tensor()) {
  cuda::cross_entropy_forward(losses.strided(), logits.strided(), target.strided(), params,
                              {totals.get(), reduced.defined() ? reduced.raw_data() : nullptr, true});
  return cuda::read_totals(totals.get(), target.strided(), logits.size(1), params.ignore_index,
                           "cross_entropy");
}

kernel::LossTotal nll_totals(const Tensor& losses, const Tensor& scores, const Tensor& target,
                          int64_t ignore_index, const DeviceTotals& totals) {
  cuda::nll_loss_forward(losses.strided(), scores.strided(), target.strided(), ignore_index,
                         {totals.get(), nullptr, false});
  return cuda::read_totals(totals.get(), target.strided(), scores.size(1), ignore_index, "nll_loss");
}

void check_totals(const kernel::LossTotal& actual, const kernel::LossTotal& expected, Tolerance tol) {
  CHECK(actual.count == expected.count);
  CHECK(actual.sum == doctest::Approx(expected.sum).epsilon(tol.rtol));
  // The mean is sum / count on both sides, so it agrees exactly when these do.
}

// Forward for every reduction, then the backward for each, on one config.
// `is_nll` runs nll_loss on the same scores (read as log-probabilities).
void check_config(const Config& cfg, bool is_nll, Generator& gen) {
  CAPTURE(shape_str(cfg.scores));
  CAPTURE(layout_name(cfg.layout));
  CAPTURE(dtype_name(cfg.dtype));
  CAPTURE(cfg.eps);
  CAPTURE(cfg.ignore_index);
  const Tolerance tol = tolerance_for(cfg.dtype);
  const int64_t classes = cfg.scores[1];
  const kernel::CrossEntropyParams params{cfg.ignore_index, cfg.eps};
  Tensor scores = randn(cfg.scores, {.dtype = cfg.dtype}, &gen);
  Tensor target = random_targets(position_shape(cfg.scores), classes, cfg.ignore_index, gen);
  Tensor gscores = place(scores, cfg.layout), gtarget = gpu_target(target);

  Tensor losses_ref = empty(target.sizes(), {.dtype = cfg.dtype});
  Tensor losses = poisoned(target.sizes(), cfg.dtype);
  kernel::LossTotal total_ref, total;
  DeviceTotals totals;
  Tensor mean = poisoned({}, cfg.dtype);
  if (is_nll) {
    total_ref = cpu::nll_loss_forward(losses_ref.strided(), scores.strided(), target.strided(),
                                      cfg.ignore_index);
    total = nll_totals(losses, gscores, gtarget, cfg.ignore_index, totals);
  } else {
    total_ref = cpu::cross_entropy_forward(losses_ref.strided(), scores.strided(), target.strided(),
                                           params);
    total = cross_entropy_totals(losses, gscores, gtarget, params, totals, mean);
    if (total_ref.count > 0) {
      CHECK(mean.item() == doctest::Approx(total_ref.sum / total_ref.count).epsilon(tol.rtol));
    }
  }
  CHECK_CLOSE(losses.cpu(), losses_ref, tol.rtol, tol.atol);
  check_totals(total, total_ref, tol);

  for (LossReduction reduction : kReductions) {
    CAPTURE(static_cast<int>(reduction));
    const LossGrad g = loss_grad(reduction, target, total_ref, cfg.dtype, gen);
    Tensor dscores_ref = empty(cfg.scores, {.dtype = cfg.dtype});
    Tensor dscores = poisoned(cfg.scores, cfg.dtype, cfg.layout);
    if (is_nll) {
      cpu::nll_loss_backward(dscores_ref.strided(), target.strided(), g.cpu.strided(), g.scale,
                             cfg.ignore_index);
      cuda::nll_loss_backward(dscores.strided(), gtarget.strided(), g.gpu.strided(),
                              totals.scale(reduction == LossReduction::Mean), cfg.ignore_index);
    } else {
      cpu::cross_entropy_backward(dscores_ref.strided(), scores.strided(), target.strided(),
                                  g.cpu.strided(), g.scale, params);
      cuda::cross_entropy_backward(dscores.strided(), gscores.strided(), gtarget.strided(),
                                   g.gpu.strided(), totals.scale(reduction == LossReduction::Mean),
                                   params);
    }
    CHECK_CLOSE(dscores.cpu(), dscores_ref, tol.rtol, tol.atol);
  }
}

Tensor int64_tensor(const std::vector<double>& values, const Shape& sizes) {
  return tensor(values, sizes, {.dtype = DType::Int64}).to(testing::test_gpu());
}

}  // namespace

LOOM_GPU_TEST_CASE("GPU cross_entropy matches the CPU kernels for every reduction and layout") {
  Generator gen(41);
  for (const Config& cfg : configs()) check_config(cfg, /*is_nll=*/false, gen);
}

LOOM_GPU_TEST_CASE("GPU nll_loss matches the CPU kernels for every reduction and layout") {
  Generator gen(42);
  for (const Config& cfg : configs()) {
    if (cfg.eps == 0.0) check_config(cfg, /*is_nll=*/true, gen);
  }
}

LOOM_GPU_TEST_CASE("an out-of-range target is an IndexError naming it, and the GPU goes on") {
  Generator gen(43);
  Tensor logits = randn({3, 4}, {}, &gen).to(testing::test_gpu());
  Tensor losses = empty({3}, {.device = testing::test_gpu()});
  const kernel::CrossEntropyParams params{};
  // Two bad targets: the error names the first position, whichever block sees it first.
  Tensor bad = int64_tensor({1, 7, -2}, {3});
  DeviceTotals totals;
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy_totals(losses, logits, bad, params, totals), IndexError,
                             "[cross_entropy] target 7 at position 1 is out of range for 4 classes");
  CHECK_THROWS_WITH_FRAGMENT(nll_totals(losses, logits, bad, -100, totals), IndexError,
                             "[nll_loss] target 7 at position 1 is");

  Tensor logits4 = randn({2, 3, 2, 3}, {}, &gen).to(testing::test_gpu());
  std::vector<double> t(12, 0.0);
  t[8] = 3;  // position (1, 0, 2)
  Tensor bad4 = int64_tensor(t, {2, 2, 3});
  Tensor losses4 = empty({2, 2, 3}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(cross_entropy_totals(losses4, logits4, bad4, params, totals), IndexError,
                             "target 3 at position (1, 0, 2) is out of range for 3 classes");

  // The backward never indexes with it either: that row is NaN, the others finite.
  Tensor dlogits = empty({3, 4}, {.device = testing::test_gpu()});
  Tensor dloss = ones({3}, {.device = testing::test_gpu()});
  cuda::cross_entropy_backward(dlogits.strided(), logits.strided(), bad.strided(), dloss.strided(),
                               totals.scale(false), params);
  std::vector<double> grads = testing::values(dlogits);
  for (int64_t c = 0; c < 4; ++c) {
    CHECK(std::isfinite(grads[c]));
    CHECK(std::isnan(grads[4 + c]));
    CHECK(std::isnan(grads[8 + c]));
  }

  // The flag does not stick: a valid call afterwards works and is right.
  Tensor good = int64_tensor({1, 3, 0}, {3});
  Tensor losses_ref = empty({3});
  const kernel::LossTotal ref = cpu::cross_entropy_forward(
      losses_ref.strided(), logits.cpu().strided(), good.cpu().strided(), params);
  const kernel::LossTotal total = cross_entropy_totals(losses, logits, good, params, totals);
  CHECK(total.count == 3);
  CHECK(total.sum == doctest::Approx(ref.sum).epsilon(1e-5));
  CHECK_CLOSE(losses.cpu(), losses_ref, 1e-5, 1e-6);
}

LOOM_GPU_TEST_CASE("masked (-inf) logits give the CPU's finite losses and gradients") {
  Tensor logits = tensor({0, -INFINITY, 1, -INFINITY, 2, 0.5, -INFINITY, -1}, {2, 4});
  Tensor target = tensor({2, 1}, {2}, {.dtype = DType::Int64});
  Tensor losses_ref = empty({2}), dlogits_ref = empty({2, 4}), dloss = ones({2});
  const kernel::CrossEntropyParams params{};
  const kernel::LossTotal ref =
      cpu::cross_entropy_forward(losses_ref.strided(), logits.strided(), target.strided(), params);
  cpu::cross_entropy_backward(dlogits_ref.strided(), logits.strided(), target.strided(),
                              dloss.strided(), 1.0, params);
  Tensor glogits = logits.to(testing::test_gpu()), gtarget = target.to(testing::test_gpu());
  Tensor losses = poisoned({2}, DType::Float32), dlogits = poisoned({2, 4}, DType::Float32);
  DeviceTotals totals;
  const kernel::LossTotal total = cross_entropy_totals(losses, glogits, gtarget, params, totals);
  cuda::cross_entropy_backward(dlogits.strided(), glogits.strided(), gtarget.strided(),
                               dloss.to(testing::test_gpu()).strided(), totals.scale(false), params);
  CHECK(std::isfinite(ref.sum));
  CHECK(total.sum == doctest::Approx(ref.sum).epsilon(1e-5));
  CHECK_CLOSE(losses.cpu(), losses_ref, 1e-5, 1e-6);
  CHECK_CLOSE(dlogits.cpu(), dlogits_ref, 1e-5, 1e-6);
}

LOOM_GPU_TEST_CASE("an empty batch totals nothing and writes nothing") {
  Tensor logits = empty({0, 5}, {.device = testing::test_gpu()});
  Tensor target = empty({0}, {.dtype = DType::Int64, .device = testing::test_gpu()});
  Tensor losses = empty({0}, {.device = testing::test_gpu()});
  DeviceTotals totals;
  const kernel::LossTotal total = cross_entropy_totals(losses, logits, target, {}, totals);
  CHECK(total.sum == 0.0);
  CHECK(total.count == 0);
  Tensor dlogits = empty({0, 5}, {.device = testing::test_gpu()});
  cuda::cross_entropy_backward(dlogits.strided(), logits.strided(), target.strided(),
                               losses.strided(), totals.scale(false), {});
  const kernel::LossTotal nll = nll_totals(losses, logits, target, -100, totals);
  CHECK(nll.count == 0);
}

LOOM_GPU_TEST_CASE("many positions: grid-stride loops, block totals, and the same sum every run") {
  // 200003 positions of 3 classes need more blocks than the forward launches.
  Generator gen(44);
  const kernel::CrossEntropyParams params{-100, 0.05};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    const Tolerance tol = tolerance_for(dtype);
    Tensor logits = randn({200003, 3}, {.dtype = dtype}, &gen);
    Tensor target = random_targets({200003}, 3, params.ignore_index, gen);
    Tensor losses_ref = empty({200003}, {.dtype = dtype});
    const kernel::LossTotal ref = cpu::cross_entropy_forward(losses_ref.strided(), logits.strided(),
                                                          target.strided(), params);
    Tensor glogits = logits.to(testing::test_gpu()), gtarget = target.to(testing::test_gpu());
    Tensor losses = poisoned({200003}, dtype);
    DeviceTotals totals;
    const kernel::LossTotal first = cross_entropy_totals(losses, glogits, gtarget, params, totals);
    const kernel::LossTotal second = cross_entropy_totals(losses, glogits, gtarget, params, totals);
    check_totals(first, ref, tol);
    CHECK(first.sum == second.sum);  // bit for bit: the block totals add in a fixed order
    CHECK_CLOSE(losses.cpu(), losses_ref, tol.rtol, tol.atol);
  }
}
#endif  // LOOM_WITH_CUDA
