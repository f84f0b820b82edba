// File: core/ops/distance.h
// Similarity and distance between vectors, as torch.nn.functional's: composites
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

}  // namespace loom
