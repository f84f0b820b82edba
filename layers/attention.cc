// File: layers/attention.cc
// L target length, S source length, N batch, E embed_dim, H num_heads, D = E / H.
#include "layers/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/ops/ops.h"
#include "layers/init.h"
#include "layers/repr.h"

namespace loom::nn {

namespace {

constexpr const char* kMha = "MultiheadAttention";

// torch.nn's mask (true = not allowed, or added) as scaled_dot_product_attention
// takes it (true = attend, or added): both masks merged, broadcast to (N, H, L, S).
Tensor merged_mask(const Tensor& attn_mask, const Tensor& key_padding_mask) {
  if (!attn_mask.defined() && !key_padding_mask.defined()) return {};
  const bool both_bool = (!attn_mask.defined() || attn_mask.dtype() == DType::Bool) &&
                         (!key_padding_mask.defined() || key_padding_mask.dtype() == DType::Bool);
  if (both_bool) {
    const Tensor blocked = !attn_mask.defined()          ? key_padding_mask
                           : !key_padding_mask.defined() ? attn_mask
                                                         : logical_or(attn_mask, key_padding_mask);
    return logical_not(blocked);
  }
  // One of them adds to the scores: a Bool one becomes -inf where it blocks.
  auto additive = [](const Tensor& m, const Tensor& like) {
    if (m.dtype() != DType::Bool) return m;
    return masked_fill(zeros({1}, {.dtype = like.dtype(), .device = like.device()}).expand(m.sizes()), m, -INFINITY);
  };
  const Tensor& floating = attn_mask.defined() && attn_mask.dtype() != DType::Bool ? attn_mask : key_padding_mask;
  if (!attn_mask.defined()) return additive(key_padding_mask, floating);
  if (!key_padding_mask.defined()) return additive(attn_mask, floating);
  return add(additive(attn_mask, floating), additive(key_padding_mask, floating));
}

void check_mask_dtype(const Tensor& m, const char* name) {
  LOOM_CHECK(m.dtype() == DType::Bool || is_floating(m.dtype()), TypeError,
             "[{}] {} must be Bool (true = that position is not attended, as in torch.nn) or floating (added to the "
             "scores), got {}",
             kMha, name, dtype_name(m.dtype()));
}

// attn_mask (L, S), or (N * H, L, S) as (N, H, L, S).
Tensor attention_mask(const Tensor& m, int64_t n, int64_t h, int64_t l, int64_t s) {
  if (!m.defined()) return m;
  check_mask_dtype(m, "attn_mask");
  const bool fits = m.sizes() == Shape{l, s} || m.sizes() == Shape{n * h, l, s};
  LOOM_CHECK(fits, ShapeError,
             "[{}] attn_mask must be (L, S) = ({}, {}) or (N * num_heads, L, S) = ({}, {}, {}), got {}", kMha, l, s,
             n * h, l, s, shape_str(m.sizes()));
  return m.dim() == 2 ? m : m.reshape({n, h, l, s});
}

// key_padding_mask (N, S), or (S) for unbatched input, as (N, 1, 1, S).
Tensor padding_mask(const Tensor& m, int64_t n, int64_t s, bool batched) {
  if (!m.defined()) return m;
  check_mask_dtype(m, "key_padding_mask");
  const bool fits = batched ? m.sizes() == Shape{n, s} : m.sizes() == Shape{s};
  LOOM_CHECK(fits, ShapeError, "[{}] key_padding_mask must be {}, got {}", kMha,
             batched ? fmt::format("(N, S) = ({}, {})", n, s) : fmt::format("(S) = ({})", s), shape_str(m.sizes()));
  return m.reshape({n, 1, 1, s});
}

// The call's masks as scaled_dot_product_attention takes them; `dims` is
// (N, H, L, S). is_causal with key padding alone becomes one merged mask.
AttentionOptions masks_of(const AttentionCall& call, const Shape& dims, bool batched, Device device) {
  const int64_t n = dims[0], h = dims[1], l = dims[2], s = dims[3];
  const Tensor padding = padding_mask(call.key_padding_mask, n, s, batched);
  AttentionOptions options{.attn_mask = merged_mask(attention_mask(call.attn_mask, n, h, l, s), padding)};
  options.is_causal = call.is_causal && !options.attn_mask.defined();
  if (call.is_causal && !call.attn_mask.defined() && options.attn_mask.defined()) {
    options.attn_mask = merged_mask(causal_blocked(l, s, device), padding);
  }
  return options;
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  LOOM_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, ValueError,
             "[{}] embed_dim {} must split evenly over num_heads {} (both positive)", kMha, embed_dim, num_heads);
  LOOM_CHECK(options.kdim >= 0 && options.vdim >= 0, ValueError, "[{}] kdim and vdim must be >= 0, got {} and {}",
             kMha, options.kdim, options.vdim);
  LOOM_CHECK(options.dropout >= 0 && options.dropout < 1, ValueError, "[{}] dropout must be in [0, 1), got {}", kMha,
             options.dropout);
  if (options_.kdim == 0) options_.kdim = embed_dim;
  if (options_.vdim == 0) options_.vdim = embed_dim;
  same_dims_ = options_.kdim == embed_dim && options_.vdim == embed_dim;
  if (same_dims_) {
    in_proj_weight_ = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  } else {
    q_proj_weight_ = register_parameter("q_proj_weight", empty({embed_dim, embed_dim}));
    k_proj_weight_ = register_parameter("k_proj_weight", empty({embed_dim, options_.kdim}));
    v_proj_weight_ = register_parameter("v_proj_weight", empty({embed_dim, options_.vdim}));
  }
  if (options.bias) in_proj_bias_ = register_parameter("in_proj_bias", empty({3 * embed_dim}));
  out_proj_ = register_module("out_proj", Linear(embed_dim, embed_dim, {.bias = options.bias}));
  reset_parameters(options.generator);
}

// As torch.nn.MultiheadAttention._reset_parameters: Xavier-uniform projections
// (the stacked one as one matrix), zero biases; out_proj.weight as a Linear's.
void MultiheadAttention::reset_parameters(Generator* generator) {
  out_proj_->reset_parameters(generator);
  for (const Tensor& w : {in_proj_weight_, q_proj_weight_, k_proj_weight_, v_proj_weight_}) {
    if (w.defined()) init::xavier_uniform_(w, 1.0, generator);
  }
  if (in_proj_bias_.defined()) init::zeros_(in_proj_bias_);
  if (out_proj_->bias().defined()) init::zeros_(out_proj_->bias());
}

Tensor MultiheadAttention::projected(const Tensor& x, int64_t part) const {
  const Tensor& own = part == 0 ? q_proj_weight_ : part == 1 ? k_proj_weight_ : v_proj_weight_;
  const Tensor w = same_dims_ ? in_proj_weight_.narrow(0, part * embed_dim_, embed_dim_) : own;
  const Tensor b = in_proj_bias_.defined() ? in_proj_bias_.narrow(0, part * embed_dim_, embed_dim_) : Tensor();
  return linear(x, w, b);
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const AttentionCall& call) {
  LOOM_CHECK(query.defined() && key.defined() && value.defined(), ValueError,
             "[{}] query, key and value must be defined", kMha);
  const bool batched = query.dim() == 3;
  LOOM_CHECK((query.dim() == 2 || batched) && key.dim() == query.dim() && value.dim() == query.dim(), ShapeError,
             "[{}] expects query, key and value all 3-d ({}) or all 2-d (unbatched), got shapes {}, {} and {}", kMha,
             options_.batch_first ? "N, L, E" : "L, N, E", shape_str(query.sizes()), shape_str(key.sizes()),
             shape_str(value.sizes()));
  // Everything batch first from here: (N, L, E).
  auto batch_first = [&](const Tensor& t) {
    return !batched ? t.unsqueeze(0) : options_.batch_first ? t : t.transpose(0, 1);
  };
  const Tensor q_in = batch_first(query), k_in = batch_first(key), v_in = batch_first(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1), d = embed_dim_ / num_heads_;
  LOOM_CHECK(q_in.size(2) == embed_dim_ && k_in.size(2) == options_.kdim && v_in.size(2) == options_.vdim &&
                 k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s,
             ShapeError,
             "[{}] expects query (.., {}), key (.., {}) and value (.., {}) with one batch and key and value of one "
             "length, got shapes {}, {} and {}",
             kMha, embed_dim_, options_.kdim, options_.vdim, shape_str(query.sizes()), shape_str(key.sizes()),
             shape_str(value.sizes()));
  auto heads = [&](const Tensor& t, int64_t rows) {  // (N, rows, E) -> (N, H, rows, D)
    return t.reshape({n, rows, num_heads_, d}).permute({0, 2, 1, 3});
  };
  Tensor q, k, v;
  if (same_dims_ && query.is_same(key) && key.is_same(value)) {  // self-attention: one (N, L, 3E) projection
    const Tensor qkv = linear(q_in, in_proj_weight_, in_proj_bias_);
    q = heads(qkv.narrow(2, 0, embed_dim_), l);
    k = heads(qkv.narrow(2, embed_dim_, embed_dim_), s);
    v = heads(qkv.narrow(2, 2 * embed_dim_, embed_dim_), s);
  } else {
    q = heads(projected(q_in, 0), l), k = heads(projected(k_in, 1), s), v = heads(projected(v_in, 2), s);
  }
  AttentionOptions options = masks_of(call, {n, num_heads_, l, s}, batched, q.device());
  options.dropout_p = is_training() ? options_.dropout : 0.0;
  AttentionOutput out;
  Tensor y;  // (N, H, L, D)
  if (call.need_weights) {
    const Tensor w = attention_weights(q, k, options);  // (N, H, L, S)
    y = matmul(w, v);
    out.weights = call.average_attn_weights ? mean(w, {1}) : w;
    if (!batched) out.weights = out.weights.squeeze(0);
  } else {
    y = scaled_dot_product_attention(q, k, v, options);
  }
  out.output = (*out_proj_)(y.permute({0, 2, 1, 3}).reshape({n, l, embed_dim_}));
  out.output = !batched ? out.output.squeeze(0) : options_.batch_first ? out.output : out.output.transpose(0, 1);
  return out;
}

AttentionOutput MultiheadAttention::operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                               const AttentionCall& call) {
  AttentionOutput out;
  Module::call(query, [&] {
    out = forward(query, key, value, call);
    return out.output;
  });
  return out;
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x, {.need_weights = false}).output; }

std::string MultiheadAttention::extra_repr() const {
  std::string s = fmt::format("embed_dim={}, num_heads={}", embed_dim_, num_heads_);
  if (options_.dropout != 0) s += fmt::format(", dropout={}", options_.dropout);
  if (!options_.bias) s += ", bias=False";
  if (!same_dims_) s += fmt::format(", kdim={}, vdim={}", options_.kdim, options_.vdim);
  if (options_.batch_first) s += ", batch_first=True";
  return s;
}

namespace {

void check_layer_options(const TransformerLayerOptions& o, const char* type) {
  LOOM_CHECK(o.activation == kernel::ActivationKind::Relu || o.activation == kernel::ActivationKind::Gelu,
             ValueError, "[{}] activation must be Relu or Gelu, as torch.nn's strings", type);
  LOOM_CHECK(o.dim_feedforward > 0, ValueError, "[{}] dim_feedforward must be positive, got {}", type,
             o.dim_feedforward);
}

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return {.dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first, .generator = o.generator};
}

// A sublayer with its residual add and its norm: after the add (post-norm), or
// on the sublayer's input (norm_first).
template <class Block>
Tensor residual(const Tensor& x, LayerNorm& norm, bool norm_first, Block block) {
  return norm_first ? add(x, block(norm(x))) : norm(add(x, block(x)));
}

// linear2(dropout(activation(linear1(x)))): the feed-forward block before its own dropout.
Tensor feed_forward(Linear& linear1, Dropout& dropout, Linear& linear2, kernel::ActivationKind act, const Tensor& x) {
  return linear2(dropout(activation(linear1(x), act)));
}

// The attention of x to `memory` (x itself for self-attention), its output alone.
Tensor attend(MultiheadAttention& attention, const Tensor& x, const Tensor& memory, const Tensor& mask,
              const Tensor& padding, bool causal) {
  const AttentionCall call{.key_padding_mask = padding, .need_weights = false, .attn_mask = mask, .is_causal = causal};
  return attention(x, memory, memory, call).output;
}

// A layer of the same shape and options holding a copy of `layer`'s weights.
template <class Layer>
std::shared_ptr<Layer> copy_of(const Layer& layer, int64_t d_model, int64_t nhead, TransformerLayerOptions o) {
  o.generator = nullptr;  // the weights are copied, not drawn
  auto copy = std::make_shared<Layer>(d_model, nhead, o);
  const Tensor like = layer.parameters().front();
  copy->to(like.device()).to(like.dtype());
  copy->load_state_dict(layer.state_dict());
  copy->train(layer.is_training());
  return copy;
}

// The layers of a TransformerEncoder or TransformerDecoder: `num_layers` copies of `layer`.
template <class Layer>
std::shared_ptr<ModuleList> stack_of(const Layer& layer, int64_t num_layers, const char* stack) {
  LOOM_CHECK(num_layers >= 1, ValueError, "[{}] num_layers must be >= 1, got {}", stack, num_layers);
  auto layers = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(layer.clone());
  return layers;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o)
    : d_model_(d_model), nhead_(nhead), options_(o) {
  check_layer_options(o, "TransformerEncoderLayer");
  // Registered in torch.nn's order, so state_dict lists the same keys in the same order.
  self_attn_ = register_module("self_attn", MultiheadAttention(d_model, nhead, attention_options(o)));
  linear1_ = register_module("linear1", Linear(d_model, o.dim_feedforward, {.bias = o.bias, .generator = o.generator}));
  dropout_ = register_module("dropout", Dropout(o.dropout));
  linear2_ = register_module("linear2", Linear(o.dim_feedforward, d_model, {.bias = o.bias, .generator = o.generator}));
  norm1_ = register_module("norm1", LayerNorm({d_model}, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2_ = register_module("norm2", LayerNorm({d_model}, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1_ = register_module("dropout1", Dropout(o.dropout));
  dropout2_ = register_module("dropout2", Dropout(o.dropout));
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  return copy_of(*this, d_model_, nhead_, options_);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const EncoderCall& call) {
  const Tensor x = residual(src, *norm1_, options_.norm_first, [&](const Tensor& t) {
    return (*dropout1_)(attend(*self_attn_, t, t, call.src_mask, call.src_key_padding_mask, call.is_causal));
  });
  return residual(x, *norm2_, options_.norm_first, [&](const Tensor& t) {
    return (*dropout2_)(feed_forward(*linear1_, *dropout_, *linear2_, options_.activation, t));
  });
}

Tensor TransformerEncoderLayer::operator()(const Tensor& src, const EncoderCall& call) {
  return Module::call(src, [&] { return forward(src, call); });
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm) {
  layers_ = register_module("layers", stack_of(layer, num_layers, "TransformerEncoder"));
  if (norm) norm_ = register_module("norm", std::move(norm));
}

Tensor TransformerEncoder::forward(const Tensor& src, const EncoderCall& call) {
  Tensor h = src;
  for (const auto& layer : *layers_) h = (*std::static_pointer_cast<TransformerEncoderLayer>(layer))(h, call);
  return norm_ ? (*norm_)(h) : h;
}

Tensor TransformerEncoder::operator()(const Tensor& src, const EncoderCall& call) {
  return Module::call(src, [&] { return forward(src, call); });
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o)
    : d_model_(d_model), nhead_(nhead), options_(o) {
  check_layer_options(o, "TransformerDecoderLayer");
  // Registered in torch.nn's order, so state_dict lists the same keys in the same order.
  self_attn_ = register_module("self_attn", MultiheadAttention(d_model, nhead, attention_options(o)));
  multihead_attn_ = register_module("multihead_attn", MultiheadAttention(d_model, nhead, attention_options(o)));
  linear1_ = register_module("linear1", Linear(d_model, o.dim_feedforward, {.bias = o.bias, .generator = o.generator}));
  dropout_ = register_module("dropout", Dropout(o.dropout));
  linear2_ = register_module("linear2", Linear(o.dim_feedforward, d_model, {.bias = o.bias, .generator = o.generator}));
  norm1_ = register_module("norm1", LayerNorm({d_model}, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2_ = register_module("norm2", LayerNorm({d_model}, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm3_ = register_module("norm3", LayerNorm({d_model}, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1_ = register_module("dropout1", Dropout(o.dropout));
  dropout2_ = register_module("dropout2", Dropout(o.dropout));
  dropout3_ = register_module("dropout3", Dropout(o.dropout));
}

std::shared_ptr<TransformerDecoderLayer> TransformerDecoderLayer::clone() const {
  return copy_of(*this, d_model_, nhead_, options_);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const DecoderCall& call) {
  LOOM_CHECK(tgt.defined() && memory.defined(), ValueError, "[TransformerDecoderLayer] tgt and memory must be defined");
  const bool first = options_.norm_first;
  Tensor x = residual(tgt, *norm1_, first, [&](const Tensor& t) {
    return (*dropout1_)(attend(*self_attn_, t, t, call.tgt_mask, call.tgt_key_padding_mask, call.tgt_is_causal));
  });
  x = residual(x, *norm2_, first, [&](const Tensor& t) {
    return (*dropout2_)(attend(*multihead_attn_, t, memory, call.memory_mask, call.memory_key_padding_mask,
                               call.memory_is_causal));
  });
  return residual(x, *norm3_, first, [&](const Tensor& t) {
    return (*dropout3_)(feed_forward(*linear1_, *dropout_, *linear2_, options_.activation, t));
  });
}

Tensor TransformerDecoderLayer::operator()(const Tensor& tgt, const Tensor& memory, const DecoderCall& call) {
  return Module::call(tgt, [&] { return forward(tgt, memory, call); });
}

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm) {
  layers_ = register_module("layers", stack_of(layer, num_layers, "TransformerDecoder"));
  if (norm) norm_ = register_module("norm", std::move(norm));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const DecoderCall& call) {
  Tensor h = tgt;
  for (const auto& layer : *layers_) {
    h = (*std::static_pointer_cast<TransformerDecoderLayer>(layer))(h, memory, call);
  }
  return norm_ ? (*norm_)(h) : h;
}

Tensor TransformerDecoder::operator()(const Tensor& tgt, const Tensor& memory, const DecoderCall& call) {
  return Module::call(tgt, [&] { return forward(tgt, memory, call); });
}

Transformer::Transformer(TransformerOptions o) : options_(o) {
  const TransformerLayerOptions layer{.dim_feedforward = o.dim_feedforward,
                                      .dropout = o.dropout,
                                      .activation = o.activation,
                                      .layer_norm_eps = o.layer_norm_eps,
                                      .batch_first = o.batch_first,
                                      .norm_first = o.norm_first,
                                      .bias = o.bias,
                                      .generator = o.generator};
  auto norm = [&] { return std::make_shared<LayerNorm>(Shape{o.d_model}, LayerNormOptions{.eps = o.layer_norm_eps,
                                                                                          .bias = o.bias}); };
  encoder_ = o.custom_encoder;
  if (!encoder_) {
    encoder_ = std::make_shared<TransformerEncoder>(TransformerEncoderLayer(o.d_model, o.nhead, layer),
                                                    o.num_encoder_layers, norm());
  }
  decoder_ = o.custom_decoder;
  if (!decoder_) {
    decoder_ = std::make_shared<TransformerDecoder>(TransformerDecoderLayer(o.d_model, o.nhead, layer),
                                                    o.num_decoder_layers, norm());
  }
  register_module("encoder", encoder_);
  register_module("decoder", decoder_);
  // As torch.nn's _reset_parameters: every matrix (the copies' included) drawn anew.
  for (const Tensor& p : parameters()) {
    if (p.dim() > 1) init::xavier_uniform_(p, 1.0, o.generator);
  }
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerCall& call) {
  LOOM_CHECK(src.defined() && tgt.defined(), ValueError, "[Transformer] src and tgt must be defined");
  const int64_t batch = options_.batch_first ? 0 : 1;
  const bool paired =
      src.dim() == tgt.dim() && (src.dim() == 2 || (src.dim() == 3 && src.size(batch) == tgt.size(batch)));
  LOOM_CHECK(paired, ShapeError,
             "[Transformer] src and tgt must both be 3-d ({}) with one batch size, or both 2-d (unbatched); got "
             "shapes {} and {}",
             options_.batch_first ? "N, S, E" : "S, N, E", shape_str(src.sizes()), shape_str(tgt.sizes()));
  LOOM_CHECK(src.size(-1) == options_.d_model && tgt.size(-1) == options_.d_model, ShapeError,
             "[Transformer] src and tgt must have d_model = {} features, got shapes {} and {}", options_.d_model,
             shape_str(src.sizes()), shape_str(tgt.sizes()));
  const Tensor memory = (*encoder_)(src, {.src_mask = call.src_mask,
                                          .src_key_padding_mask = call.src_key_padding_mask,
                                          .is_causal = call.src_is_causal});
  return (*decoder_)(tgt, memory, {.tgt_mask = call.tgt_mask,
                                   .memory_mask = call.memory_mask,
                                   .tgt_key_padding_mask = call.tgt_key_padding_mask,
                                   .memory_key_padding_mask = call.memory_key_padding_mask,
                                   .tgt_is_causal = call.tgt_is_causal,
                                   .memory_is_causal = call.memory_is_causal});
}

Tensor Transformer::operator()(const Tensor& src, const Tensor& tgt, const TransformerCall& call) {
  return Module::call(tgt, [&] { return forward(src, tgt, call); });
}

Tensor generate_square_subsequent_mask(int64_t size, const TensorOptions& options) {
  LOOM_CHECK(is_floating(options.dtype), TypeError,
             "[generate_square_subsequent_mask] makes an added (floating) mask; got dtype {}",
             dtype_name(options.dtype));
  LOOM_CHECK(size >= 0, ValueError, "[generate_square_subsequent_mask] size must be >= 0, got {}", size);
  return masked_fill(zeros({size, size}, options), causal_blocked(size, size, options.device), -INFINITY);
}

}  // namespace loom::nn
