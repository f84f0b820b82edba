// File: layers/functional.h
// nn::functional: the functional ops under the name PyTorch users reach for,
//   auto loss = loom::nn::functional::cross_entropy(net(x), y);
// They are loom's own ops (core/ops/*.h), nothing more.
#pragma once

#include "core/ops/ops.h"

namespace loom::nn::functional {

using loom::adaptive_avg_pool1d;
using loom::adaptive_avg_pool2d;
using loom::adaptive_max_pool1d;
using loom::adaptive_max_pool2d;
using loom::avg_pool1d;
using loom::avg_pool2d;
using loom::batch_norm;
using loom::binary_cross_entropy;
using loom::binary_cross_entropy_with_logits;
using loom::conv1d;
using loom::conv2d;
using loom::cosine_embedding_loss;
using loom::cosine_similarity;
using loom::cross_entropy;
using loom::dropout;
using loom::dropout2d;
using loom::elu;
using loom::gelu;
using loom::global_avg_pool2d;
using loom::global_max_pool2d;
using loom::hardswish;
using loom::hardtanh;
using loom::huber_loss;
using loom::interpolate;
using loom::kl_div;
using loom::l1_loss;
using loom::leaky_relu;
using loom::linear;
using loom::log_softmax;
using loom::max_pool1d;
using loom::max_pool2d;
using loom::mish;
using loom::mse_loss;
using loom::nll_loss;
using loom::one_hot;
using loom::pairwise_distance;
using loom::pad;
using loom::pixel_shuffle;
using loom::pixel_unshuffle;
using loom::prelu;
using loom::relu;
using loom::relu6;
using loom::sigmoid;
using loom::silu;
using loom::smooth_l1_loss;
using loom::softmax;
using loom::softplus;
using loom::tanh;
using loom::triplet_margin_loss;

// F.normalize under its PyTorch name; in namespace loom it is lp_normalize,
// since loom::normalize is the norm layers' standardizing primitive.
inline Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12) {
  return lp_normalize(x, p, dim, eps);
}

}  // namespace loom::nn::functional
