// File: core/ops/distance.h
// Similarity and distance between vectors, as torch.nn.functional's and
// torch.cdist: composites
// of vector_norm (core/ops/reduction.h) and elementwise ops, whose gradients
// they take.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom {

// The cosine of the angle between x1 and x2 along `dim`, as
// F.cosine_similarity: x1 and x2 (floating, promoted and broadcast together)
// are each divided by their L2 norm along `dim`, raised to eps where it is
// smaller, then multiplied and summed along `dim`, so the result lies in
// [-1, 1] and a zero vector's similarity is 0. The gradient flows through the
// norms as if they were not raised, as PyTorch's does.
//   Tensor s = cosine_similarity(queries, keys);  // (N, D) and (N, D) -> (N)
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

// The p-norm of x1 - x2 + eps along the last dim, as F.pairwise_distance (x1
// and x2 promoted and broadcast together; p as vector_norm's ord). eps keeps
// the gradient finite where two rows are equal.
//   Tensor d = pairwise_distance(anchors, positives);  // (N, D) and (N, D) -> (N)
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6,
                         bool keepdim = false);

// The p-norm distance between each row of x1 and each row of x2, as
// torch.cdist: x1 (*, P, M) and x2 (*, R, M), their batch dims broadcast,
// give (*, P, R); p >= 0 or inf, as vector_norm's ord. For p = 2 with more
// than 25 rows on either side the distances come from a matrix product, as
// PyTorch's default computes them (sqrt of |a|^2 - 2 a.b + |b|^2, raised to 0
// where rounding makes it negative); otherwise from the differences, which
// take P * R * M elements of memory. The gradient is 0 where a distance is 0.
//   Tensor d = cdist(queries, prototypes);  // (N, D) and (K, D) -> (N, K)
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);

// x divided by its p-norm along `dim`, raised to eps where smaller, as
// F.normalize (nn::functional::normalize; loom::normalize is the
// standardizing primitive of the norm layers): rows of unit length, a zero
// row stays zero. p as vector_norm's ord. The gradient is the quotient's,
// with none through a norm below eps (clamp_min's).
//   Tensor unit = lp_normalize(embeddings);  // (N, D): each row's L2 norm is 1
Tensor lp_normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);

}  // namespace loom
