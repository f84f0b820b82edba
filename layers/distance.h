// File: layers/distance.h
// CosineSimilarity and PairwiseDistance, as torch.nn's: modules without
// parameters over loom::cosine_similarity and loom::pairwise_distance
// (core/ops/distance.h), called with two tensors.
//   nn::CosineSimilarity similarity(1);
//   Tensor s = similarity(queries, keys);  // (N, D) and (N, D) -> (N)
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class CosineSimilarity : public Module {
 public:
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8) : dim_(dim), eps_(eps) {}
  using Module::forward;  // the one-tensor form throws TypeError
  using Module::operator();
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) {
    return call(x1, [&] { return forward(x1, x2); });
  }

 private:
  int64_t dim_;
  double eps_;
};

class PairwiseDistance : public Module {
 public:
  explicit PairwiseDistance(double p = 2.0, double eps = 1e-6, bool keepdim = false)
      : p_(p), eps_(eps), keepdim_(keepdim) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) {
    return call(x1, [&] { return forward(x1, x2); });
  }

 private:
  double p_;
  double eps_;
  bool keepdim_;
};

}  // namespace loom::nn
