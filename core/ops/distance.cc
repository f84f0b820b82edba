// File: core/ops/distance.cc
// cosine_similarity and pairwise_distance as PyTorch computes them.
#include "core/ops/distance.h"

#include <optional>
#include <string_view>
#include <utility>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
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

}  // namespace loom
