// File: layers/distance.cc
#include "layers/distance.h"

#include "core/ops/distance.h"

namespace loom::nn {

Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) {
  return cosine_similarity(x1, x2, dim_, eps_);
}

Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2) {
  return pairwise_distance(x1, x2, p_, eps_, keepdim_);
}

}  // namespace loom::nn
