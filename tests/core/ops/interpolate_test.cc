// File: tests/core/ops/interpolate_test.cc
// interpolate against PyTorch's own results (resize_golden.h: nearest and
// bilinear, size or scale factor, align_corners, recomputed scales,
// downsampling), in float64 and float32, NCHW, channels-last and strided
// inputs; float64 gradcheck on random configurations; nn::Upsample; errors.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/ops/interpolate.h"

#include <doctest/doctest.h>

#include <random>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/upsample.h"
#include "tests/core/ops/resize_golden.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

// The golden cases' input: x[i] = (i * 37) % 11 - 5, row-major.
Tensor golden_input(const Shape& sizes, DType dtype) {
  std::vector<double> v(numel_of(sizes));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 37) % 11) - 5;
  return tensor(v, sizes, {.dtype = dtype});
}

// The golden cases' upstream gradient: g[j] = j % 5 - 2.
Tensor golden_upstream(const Shape& sizes, DType dtype) {
  std::vector<double> v(numel_of(sizes));
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<double>(j % 5) - 2;
  return tensor(v, sizes, {.dtype = dtype});
}

void check_golden(const golden::InterpolateCase& c, DType dtype, MemoryFormat format, double tol) {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  CAPTURE(memory_format_name(format));
  Tensor x = golden_input(c.x_sizes, dtype).contiguous(format).requires_grad_(true);
  Tensor y = interpolate(x, c.options);
  CHECK(y.sizes() == c.y_sizes);
  CHECK(y.is_contiguous(format));
  CHECK_CLOSE(y, tensor(c.y, c.y_sizes, kF64).to(dtype), tol, tol);
  y.backward(golden_upstream(c.y_sizes, dtype));
  CHECK(x.grad().is_contiguous(format));
  CHECK_CLOSE(x.grad(), tensor(c.dx, c.x_sizes, kF64).to(dtype), tol, tol);
}

}  // namespace

TEST_CASE("interpolate matches PyTorch's results and gradients, float64 and float32") {
  for (const golden::InterpolateCase& c : golden::interpolate_cases()) {
    check_golden(c, DType::Float64, MemoryFormat::Contiguous, 1e-12);
    check_golden(c, DType::Float32, MemoryFormat::Contiguous, 2e-5);
    check_golden(c, DType::Float64, MemoryFormat::ChannelsLast, 1e-12);
  }
}

TEST_CASE("interpolate reads strided inputs: a transposed view resizes as its copy") {
  Generator gen(3);
  const Tensor base = randn({2, 3, 7, 5}, kF64, &gen);
  const Tensor view = base.transpose(2, 3);  // (2, 3, 5, 7), not dense in any standard order
  for (InterpolateMode mode : {InterpolateMode::Nearest, InterpolateMode::Bilinear}) {
    const InterpolateOptions o{.size = Size2{9, 4}, .mode = mode};
    CHECK_CLOSE(interpolate(view, o), interpolate(view.contiguous(), o), 0, 0);
  }
}

TEST_CASE("interpolate gradcheck on random configurations of both modes") {
  std::mt19937_64 rng(17);
  auto between = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Generator gen(4);
  for (int trial = 0; trial < 24; ++trial) {
    const Shape sizes = {between(1, 2), between(1, 3), between(1, 6), between(1, 6)};
    InterpolateOptions o;
    o.mode = trial % 2 == 0 ? InterpolateMode::Nearest : InterpolateMode::Bilinear;
    o.align_corners = o.mode == InterpolateMode::Bilinear && between(0, 1) == 1;
    if (between(0, 1) == 1) {
      o.size = Size2{between(1, 9), between(1, 9)};
    } else {
      const double choices[] = {0.5, 0.7, 1.0, 1.5, 2.0, 2.6};
      o.scale_factor = Scale2{choices[between(0, 5)], choices[between(0, 5)]};
      if (std::floor(sizes[2] * o.scale_factor->h) < 1 || std::floor(sizes[3] * o.scale_factor->w) < 1) {
        o.scale_factor = Scale2{2.0, 1.5};
      }
    }
    CAPTURE(trial);
    CAPTURE(shape_str(sizes));
    const Tensor x = randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
    GradcheckResult r =
        gradcheck([o](const std::vector<Tensor>& in) { return interpolate(in[0], o); }, {x});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("nn::Upsample is interpolate with fixed options, printed as PyTorch prints it") {
  nn::Upsample up({.scale_factor = 2.0, .mode = InterpolateMode::Bilinear});
  Generator gen(5);
  const Tensor x = randn({1, 2, 3, 3}, {}, &gen);
  CHECK_CLOSE(up(x), interpolate(x, {.scale_factor = 2.0, .mode = InterpolateMode::Bilinear}), 0, 0);
  CHECK(up.repr() == "Upsample(scale_factor=2.0, mode='bilinear')");
  CHECK(nn::Upsample({.size = Size2{4, 6}}).repr() == "Upsample(size=(4, 6), mode='nearest')");
  CHECK(nn::Upsample({.scale_factor = Scale2{2.0, 1.5}}).repr() ==
        "Upsample(scale_factor=(2.0, 1.5), mode='nearest')");
  CHECK(up.parameters().empty());
  CHECK_THROWS_WITH_FRAGMENT(nn::Upsample({}), ValueError,
                             "[Upsample] give exactly one of size and scale_factor (got neither)");
}

TEST_CASE("interpolate argument errors name the op and the values") {
  const Tensor x = zeros({1, 1, 3, 4});
  CHECK_THROWS_WITH_FRAGMENT(interpolate(zeros({3, 4}), {.size = 2}), ShapeError,
                             "[interpolate] x must be (N, C, H, W), got shape (3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(interpolate(x, {.size = 2, .scale_factor = 2.0}), ValueError,
                             "give exactly one of size and scale_factor (got both)");
  CHECK_THROWS_WITH_FRAGMENT(interpolate(x, {.scale_factor = 2.0, .align_corners = true}),
                             ValueError, "align_corners applies to the bilinear mode only");
  CHECK_THROWS_WITH_FRAGMENT(interpolate(x, {.scale_factor = -1.0}), ValueError,
                             "scale factors must be positive and finite, got (-1, -1)");
  CHECK_THROWS_WITH_FRAGMENT(interpolate(x, {.scale_factor = 0.1}), ShapeError,
                             "output planes must be non-empty, got input (H: 3, W: 4) and output "
                             "(H: 0, W: 0)");
  CHECK_THROWS_WITH_FRAGMENT(interpolate(zeros({1, 1, 2, 2}, {.dtype = DType::Int64}), {.size = 4}),
                             TypeError, "[interpolate] x has dtype int64");
}

}  // namespace loom
