// File: layers/attention.h
// MultiheadAttention, the transformer's encoder and decoder layers and stacks,
// and Transformer, as torch.nn's: the same parameter names, shapes,
// initialisation, mask conventions and layouts, so state_dicts move both ways.
//
//   nn::MultiheadAttention mha(64, 4, {.batch_first = true});
//   auto [y, w] = mha(x, x, x);                       // x (N, L, 64) -> y (N, L, 64), w (N, L, L)
//   Tensor z = mha(x, x, x, {.need_weights = false, .is_causal = true}).output;
//
//   nn::TransformerEncoderLayer layer(64, 4, {.dim_feedforward = 256, .batch_first = true});
//   Tensor h = layer(x, {.is_causal = true});         // a decoder-only (GPT-style) block
//
//   nn::Transformer model({.d_model = 64, .nhead = 4, .batch_first = true});
//   Tensor out = model(src, tgt, {.tgt_is_causal = true});  // (N, S, 64), (N, L, 64) -> (N, L, 64)
//
// Masks keep torch.nn's sense, which is the opposite of scaled_dot_product_attention's:
// a Bool attn_mask (L, S) or (N * num_heads, L, S), or key_padding_mask (N, S),
// is true where a position may NOT be attended; a floating one is added to the
// scores. is_causal alone builds the causal mask (torch.nn asks for attn_mask
// beside the hint; given, attn_mask is used as it is). A query with every key
// masked gets zero weights and a zero output, where torch.nn's need_weights path
// gives NaN. In training, `dropout` drops attention weights (and the returned
// weights are those after dropout, as in torch.nn).
//
// L target length, S source length, N batch, E embed_dim, H num_heads, D = E / H.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/generator.h"
#include "core/kernel/activation.h"
#include "core/tensor.h"
#include "layers/container.h"
#include "layers/dropout.h"
#include "layers/linear.h"
#include "layers/module.h"
#include "layers/norm.h"

namespace loom::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;     // on the attention weights, in training
  bool bias = true;         // in_proj_bias and out_proj.bias
  int64_t kdim = 0;         // key width; 0: embed_dim
  int64_t vdim = 0;         // value width; 0: embed_dim
  bool batch_first = false;  // (N, L, E) instead of (L, N, E)
  Generator* generator = nullptr;  // for the initial weights; dropout draws from the default generator
};

struct AttentionCall {
  Tensor key_padding_mask;           // (N, S) or (S) unbatched; Bool true = ignore that key, or added
  bool need_weights = true;          // also return the attention weights
  Tensor attn_mask;                  // (L, S) or (N * H, L, S); Bool true = not allowed, or added
  bool average_attn_weights = true;  // weights (N, L, S) averaged over heads, else (N, H, L, S)
  bool is_causal = false;            // query i attends keys 0..i (attn_mask, if given, says so already)
};

struct AttentionOutput {
  Tensor output;   // like query, with E features
  Tensor weights;  // undefined unless need_weights; (L, S) or (H, L, S) for unbatched input
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});

  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionCall& call = {});
  AttentionOutput operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                             const AttentionCall& call = {});
  using Module::operator();
  Tensor forward(const Tensor& x) override;  // self-attention's output alone (need_weights false)
  void reset_parameters(Generator* generator = nullptr);

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return options_; }

  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

 private:
  Tensor projected(const Tensor& x, int64_t part) const;  // x (..., width) -> (..., E) through part 0, 1 or 2

  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
  bool same_dims_;  // kdim == vdim == embed_dim: one in_proj_weight
  Tensor in_proj_weight_;                                  // (3E, E) when same_dims_
  Tensor q_proj_weight_, k_proj_weight_, v_proj_weight_;  // (E, E), (E, kdim), (E, vdim) otherwise
  Tensor in_proj_bias_;                                    // (3E) with bias
  std::shared_ptr<Linear> out_proj_;
};

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  kernel::ActivationKind activation = kernel::ActivationKind::Relu;  // Relu or Gelu, as torch.nn's strings
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + sa(norm1(x)), then x + ff(norm2(x))
  bool bias = true;         // every Linear's and LayerNorm's bias
  Generator* generator = nullptr;
};

struct EncoderCall {
  Tensor src_mask;              // MultiheadAttention's attn_mask
  Tensor src_key_padding_mask;  // its key_padding_mask
  bool is_causal = false;
};

// One transformer encoder layer: self-attention and a feed-forward block
// (linear1, activation, dropout, linear2), each with dropout, a residual add and
// a LayerNorm (after the add, or before the block with norm_first).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  // A layer of the same shape and options holding a copy of this one's weights
  // (torch.nn.TransformerEncoder deep-copies its layer so).
  std::shared_ptr<TransformerEncoderLayer> clone() const;

  Tensor forward(const Tensor& src, const EncoderCall& call);
  Tensor operator()(const Tensor& src, const EncoderCall& call);
  using Module::operator();
  Tensor forward(const Tensor& src) override { return forward(src, EncoderCall{}); }

  std::string type_name() const override { return "TransformerEncoderLayer"; }

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
};

// num_layers copies of `layer` (each starting from its weights, as torch.nn's
// deep copies do) applied in turn, then `norm` when given; state_dict names
// "layers.0.self_attn.in_proj_weight", ..., "norm.weight".
//
//   nn::TransformerEncoder encoder(nn::TransformerEncoderLayer(64, 4, {.batch_first = true}), 6);
//   Tensor h = encoder(x, {.is_causal = true});
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);

  Tensor forward(const Tensor& src, const EncoderCall& call);
  Tensor operator()(const Tensor& src, const EncoderCall& call);
  using Module::operator();
  Tensor forward(const Tensor& src) override { return forward(src, EncoderCall{}); }

  std::string type_name() const override { return "TransformerEncoder"; }

 private:
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

struct DecoderCall {
  Tensor tgt_mask;                  // the self-attention's attn_mask
  Tensor memory_mask;               // the cross-attention's attn_mask (L, S)
  Tensor tgt_key_padding_mask;      // the self-attention's key_padding_mask
  Tensor memory_key_padding_mask;   // the cross-attention's key_padding_mask
  bool tgt_is_causal = false;       // the self-attention is causal
  bool memory_is_causal = false;    // query i attends memory positions 0..i
};

// One transformer decoder layer: self-attention over the target, attention from
// the target to the encoder's output (`memory`), and the feed-forward block,
// each with dropout, a residual add and a LayerNorm (after the add, or before
// the block with norm_first). Options as the encoder layer's.
//
//   nn::TransformerDecoderLayer layer(64, 4, {.batch_first = true});
//   Tensor y = layer(tgt, memory, {.tgt_is_causal = true});
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  std::shared_ptr<TransformerDecoderLayer> clone() const;  // as TransformerEncoderLayer::clone

  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderCall& call = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const DecoderCall& call = {});
  using Module::operator();

  std::string type_name() const override { return "TransformerDecoderLayer"; }

 private:
  int64_t d_model_, nhead_;
  TransformerLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_, multihead_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_, dropout3_;
  std::shared_ptr<LayerNorm> norm1_, norm2_, norm3_;
};

// num_layers copies of `layer` applied in turn to the target, each attending to
// the same memory, then `norm` when given; names "layers.0.multihead_attn...".
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);

  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderCall& call = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const DecoderCall& call = {});
  using Module::operator();

  std::string type_name() const override { return "TransformerDecoder"; }

 private:
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  kernel::ActivationKind activation = kernel::ActivationKind::Relu;  // Relu or Gelu
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
  Generator* generator = nullptr;  // for the initial weights
  // torch.nn.Transformer's custom_encoder / custom_decoder: run in place of the stack the options
  // above would build (its layer counts, sizes and norms then unused; d_model still sizes the
  // inputs). Their matrices are drawn Xavier-uniform again with the rest, as torch.nn draws them.
  std::shared_ptr<TransformerEncoder> custom_encoder;
  std::shared_ptr<TransformerDecoder> custom_decoder;
};

struct TransformerCall {
  Tensor src_mask, tgt_mask, memory_mask;
  Tensor src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask;
  bool src_is_causal = false, tgt_is_causal = false, memory_is_causal = false;
};

// torch.nn.Transformer: an encoder (num_encoder_layers, then a LayerNorm) over
// the source and a decoder (num_decoder_layers, then a LayerNorm) over the
// target attending to the encoder's output. Every weight matrix is drawn
// Xavier-uniform after the layers are built, as torch.nn's _reset_parameters
// draws it. src (S, N, E) and tgt (L, N, E) (batch_first: (N, S, E), (N, L, E);
// unbatched (S, E), (L, E)) -> (L, N, E).
class Transformer : public Module {
 public:
  explicit Transformer(TransformerOptions options = {});

  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerCall& call = {});
  Tensor operator()(const Tensor& src, const Tensor& tgt, const TransformerCall& call = {});
  using Module::operator();

  TransformerEncoder& encoder() { return *encoder_; }
  TransformerDecoder& decoder() { return *decoder_; }
  const TransformerOptions& options() const { return options_; }

  std::string type_name() const override { return "Transformer"; }

 private:
  TransformerOptions options_;
  std::shared_ptr<TransformerEncoder> encoder_;
  std::shared_ptr<TransformerDecoder> decoder_;
};

// torch.nn.Transformer.generate_square_subsequent_mask: (size, size), 0 on and
// below the diagonal, -inf above it, an added mask that hides later positions.
Tensor generate_square_subsequent_mask(int64_t size, const TensorOptions& options = {});

}  // namespace loom::nn
