// File: models/vit.h
// A small Vision Transformer, written as torchvision's VisionTransformer
// (its class structure and parameter names): a patch embedding conv
// ("conv_proj"), a class token, an Encoder (position embedding, dropout,
// EncoderBlocks "encoder_layer_0", ..., a final LayerNorm "ln") and a head
// ("heads.head"). An EncoderBlock is ln_1, multi-head self-attention
// (nn::MultiheadAttention, batch first), dropout, a residual add, ln_2, an
// MLP (Linear, GELU, Dropout, Linear, Dropout) and a second residual add. The twin is in
// models/torch_models.py.
//
//   auto net = models::vit({.image_size = 28, .patch_size = 7, .in_channels = 1, .num_classes = 10});
//
// N batch, C channels, H = W = image_size, S sequence (patches + 1), E hidden, D = E / heads.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/nn.h"

namespace loom::models {

class EncoderBlock : public nn::Module {
 public:
  EncoderBlock(int64_t hidden_dim, int64_t num_heads, int64_t mlp_dim, double dropout);
  Tensor forward(const Tensor& x) override;  // (N, S, E) -> (N, S, E)

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<nn::MultiheadAttention> self_attention_;  // batch first, as torchvision's
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::Sequential> mlp_;
};

struct VitOptions {
  int64_t image_size = 28;
  int64_t patch_size = 7;
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t hidden_dim = 64;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t mlp_dim = 128;
  double dropout = 0.1;
};

// x + pos_embedding, dropout, the blocks, LayerNorm.
class Encoder : public nn::Module {
 public:
  Encoder(int64_t seq_length, const VitOptions& options);
  Tensor forward(const Tensor& x) override;  // (N, S, E) -> (N, S, E)

 private:
  Tensor pos_embedding_;  // (1, S, E)
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::ModuleDict> layers_;
  std::shared_ptr<nn::LayerNorm> ln_;
};

class VisionTransformer : public nn::Module {
 public:
  explicit VisionTransformer(VitOptions options = {});
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, num_classes)

 private:
  VitOptions options_;
  Tensor class_token_;  // (1, 1, E)
  std::shared_ptr<nn::Conv2d> conv_proj_;
  std::shared_ptr<Encoder> encoder_;
  std::shared_ptr<nn::ModuleDict> heads_;
};

std::shared_ptr<VisionTransformer> vit(VitOptions options = {});

}  // namespace loom::models
