// File: core/ops/distance.cc
// cosine_similarity, pairwise_distance and cdist as PyTorch computes them.
#include "core/ops/distance.h"

#include <optional>
#include <string_view>
#include <utility>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"

namespace loom {

namespace {

// x1 and x2 in one floating dtype and one shape.
std::pair<Tensor, Tensor> operands(const Tensor& x1, const Tensor& x2, std::string_view op) {
  check_float_tensor(x1, op, "x1");
  check_float_tensor(x2, op, "x2");
  auto [a, b] = promote_operands(x1, x2);
  const Shape sizes = broadcast_shapes(a.sizes(), b.sizes(), op);
  return {a.expand(sizes), b.expand(sizes)};
}

// max(norm, eps), with the gradient of norm itself: PyTorch raises the norm in
// place without recording it. norm + (eps - norm) is eps exactly for a zero
// norm and for norms from eps / 2 on (Sterbenz), within an ulp below that.
Tensor at_least(const Tensor& norm, double eps) {
  Tensor raise;
  {
    NoGradGuard no_grad;
    raise = sub(clamp(norm, eps, std::nullopt), norm);
  }
  return add(norm, raise);
}

// PyTorch's euclidean path of cdist: sqrt(|a|^2 - 2 a.b + |b|^2), the sum
// raised to 0 where rounding made it negative. Where a distance is 0 the
// square root is taken of 1 and masked, so its gradient there is 0, not inf.
Tensor euclidean_by_matmul(const Tensor& a, const Tensor& b) {
  const Tensor a_squares = sum(mul(a, a), {-1}, true);                     // (*, P, 1)
  const Tensor b_squares = sum(mul(b, b), {-1}, true).transpose(-2, -1);  // (*, 1, R)
  const Tensor squared = clamp(add(sub(a_squares, mul(matmul(a, b.transpose(-2, -1)), 2.0)), b_squares), 0.0,
                               std::nullopt);
  const Tensor zero = eq(squared, 0.0);
  return masked_fill(sqrt(masked_fill(squared, zero, 1.0)), zero, 0.0);
}

}  // namespace

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const auto [a, b] = operands(x1, x2, "cosine_similarity");
  const int64_t d = normalize_dim(dim, a.dim(), "cosine_similarity");
  const Tensor a_norm = at_least(vector_norm(a, 2.0, {d}, true), eps);
  const Tensor b_norm = at_least(vector_norm(b, 2.0, {d}, true), eps);
  return sum(mul(div(a, a_norm), div(b, b_norm)), {d}, false);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  const auto [a, b] = operands(x1, x2, "pairwise_distance");
  return vector_norm(add(sub(a, b), eps), p, {-1}, keepdim);
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  check_float_tensor(x1, "cdist", "x1");
  check_float_tensor(x2, "cdist", "x2");
  LOOM_CHECK(x1.dim() >= 2 && x2.dim() >= 2, ShapeError,
             "[cdist] x1 and x2 must be (*, rows, features), at least 2-D, got shapes {} and {}",
             shape_str(x1.sizes()), shape_str(x2.sizes()));
  LOOM_CHECK(x1.size(-1) == x2.size(-1), ShapeError,
             "[cdist] x1 and x2 must have as many features (last dim), got shapes {} and {}", shape_str(x1.sizes()),
             shape_str(x2.sizes()));
  LOOM_CHECK(p >= 0.0, ValueError, "[cdist] p must be >= 0 (or inf), got {}", p);
  const auto [x, y] = promote_operands(x1, x2);
  if (p == 2.0 && (x.size(-2) > 25 || y.size(-2) > 25)) return euclidean_by_matmul(x, y);
  const Tensor differences = sub(x.unsqueeze(-2), y.unsqueeze(-3));  // (*, P, R, M)
  // Without elements (no rows, or no features) every ord gives zeros or
  // nothing, as PyTorch's cdist; 2 is one that accepts an empty reduction.
  return vector_norm(differences, differences.numel() == 0 ? 2.0 : p, {-1});
}

Tensor lp_normalize(const Tensor& x, double p, int64_t dim, double eps) {
  check_float_tensor(x, "normalize");
  return div(x, clamp(vector_norm(x, p, {dim}, true), eps, std::nullopt));
}

}  // namespace loom
