// File: models/vit.cc
// N batch, S sequence, E hidden, H heads, D = E / H per head.
#include "models/vit.h"

#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/ops.h"

namespace loom::models {

namespace {

constexpr double kLayerNormEps = 1e-6;  // torchvision's ViT norm layer

}  // namespace

EncoderBlock::EncoderBlock(int64_t hidden_dim, int64_t num_heads, int64_t mlp_dim, double dropout) {
  ln_1_ = register_module("ln_1", nn::LayerNorm({hidden_dim}, {.eps = kLayerNormEps}));
  self_attention_ =
      register_module("self_attention", nn::MultiheadAttention(hidden_dim, num_heads, {.batch_first = true}));
  dropout_ = register_module("dropout", nn::Dropout(dropout));
  ln_2_ = register_module("ln_2", nn::LayerNorm({hidden_dim}, {.eps = kLayerNormEps}));
  mlp_ = register_module("mlp", nn::Sequential(nn::Linear(hidden_dim, mlp_dim), nn::GELU(), nn::Dropout(dropout),
                                               nn::Linear(mlp_dim, hidden_dim), nn::Dropout(dropout)));
}

Tensor EncoderBlock::forward(const Tensor& x) {
  Tensor h = add((*dropout_)((*self_attention_)((*ln_1_)(x))), x);
  return add(h, (*mlp_)((*ln_2_)(h)));
}

Encoder::Encoder(int64_t seq_length, const VitOptions& o) {
  pos_embedding_ = register_parameter("pos_embedding", mul(randn({1, seq_length, o.hidden_dim}), 0.02));
  dropout_ = register_module("dropout", nn::Dropout(o.dropout));
  layers_ = register_module("layers", nn::ModuleDict());
  for (int64_t i = 0; i < o.num_layers; ++i) {
    layers_->insert(fmt::format("encoder_layer_{}", i), EncoderBlock(o.hidden_dim, o.num_heads, o.mlp_dim, o.dropout));
  }
  ln_ = register_module("ln", nn::LayerNorm({o.hidden_dim}, {.eps = kLayerNormEps}));
}

Tensor Encoder::forward(const Tensor& x) {
  Tensor h = (*dropout_)(add(x, pos_embedding_));
  for (const auto& [name, block] : layers_->items()) h = (*block)(h);
  return (*ln_)(h);
}

VisionTransformer::VisionTransformer(VitOptions options) : options_(options) {
  LOOM_CHECK(options.patch_size > 0 && options.image_size % options.patch_size == 0, ValueError,
             "[VisionTransformer] image_size {} must be a multiple of patch_size {}", options.image_size,
             options.patch_size);
  const int64_t patches = (options.image_size / options.patch_size) * (options.image_size / options.patch_size);
  class_token_ = register_parameter("class_token", zeros({1, 1, options.hidden_dim}));
  conv_proj_ = register_module("conv_proj", nn::Conv2d(options.in_channels, options.hidden_dim, options.patch_size,
                                                       {.stride = options.patch_size}));
  encoder_ = register_module("encoder", Encoder(patches + 1, options));
  heads_ = register_module("heads", nn::ModuleDict());
  heads_->insert("head", nn::Linear(options.hidden_dim, options.num_classes));
}

Tensor VisionTransformer::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 4 && x.size(2) == options_.image_size && x.size(3) == options_.image_size, ShapeError,
             "[VisionTransformer] expects (N, {}, {}, {}) images, got {}", options_.in_channels, options_.image_size,
             options_.image_size, shape_str(x.sizes()));
  const int64_t n = x.size(0), e = options_.hidden_dim;
  // flatten, not reshape(n, e, -1): an empty batch has no size for the -1 to infer.
  Tensor patches = (*conv_proj_)(x).flatten(2).permute({0, 2, 1});  // (N, S - 1, E)
  // In the patches' dtype: under bf16 autocast the conv gives bf16 and the token is fp32.
  Tensor h = cat({class_token_.to(patches.dtype()).expand({n, 1, e}), patches}, 1);  // (N, S, E)
  h = (*encoder_)(h);
  return heads_->at<nn::Linear>("head")(h.select(1, 0));  // the class token's row
}

std::shared_ptr<VisionTransformer> vit(VitOptions options) { return std::make_shared<VisionTransformer>(options); }

}  // namespace loom::models
