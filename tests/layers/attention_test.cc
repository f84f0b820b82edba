// File: tests/layers/attention_test.cc
// nn::MultiheadAttention and nn::TransformerEncoderLayer on the CPU: against
// loops written here from torch.nn's definition (projections, heads, masks in
// torch.nn's sense, averaged weights) on random configurations in float64,
// float64 gradcheck, torch.nn's parameter names and initialisation, dropout in
// training only, and the errors.
//
// L target length, S source length, N batch, E embed_dim, H heads, D = E / H.
#include "layers/attention.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

using testing::values;

// The module's parameters as plain values, by torch.nn's names; the stacked
// in_proj_weight split into q, k and v.
struct Weights {
  std::vector<double> q, k, v, bq, bk, bv, out, out_bias;
};

Weights weights_of(const nn::MultiheadAttention& m) {
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = t;
  const int64_t e = m.embed_dim();
  Weights w;
  auto part = [&](const char* stacked, const char* own, int64_t i) {
    return values(p.count(stacked) ? p[stacked].narrow(0, i * e, e) : p[own]);
  };
  w.q = part("in_proj_weight", "q_proj_weight", 0);
  w.k = part("in_proj_weight", "k_proj_weight", 1);
  w.v = part("in_proj_weight", "v_proj_weight", 2);
  if (p.count("in_proj_bias")) {
    w.bq = values(p["in_proj_bias"].narrow(0, 0, e));
    w.bk = values(p["in_proj_bias"].narrow(0, e, e));
    w.bv = values(p["in_proj_bias"].narrow(0, 2 * e, e));
  }
  w.out = values(p["out_proj.weight"]);
  if (p.count("out_proj.bias")) w.out_bias = values(p["out_proj.bias"]);
  return w;
}

// rows x (width) times w^T (out, width) + b, row-major.
std::vector<double> affine(const std::vector<double>& x, int64_t rows, int64_t width, const std::vector<double>& w,
                           int64_t out, const std::vector<double>& b) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t c = 0; c < width; ++c) {
        acc += x[static_cast<size_t>(r * width + c)] * w[static_cast<size_t>(o * width + c)];
      }
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  }
  return y;
}

struct Reference {
  Tensor output;   // (N, L, E)
  Tensor weights;  // (N, H, L, S)
};

// torch.nn.MultiheadAttention's forward from its definition, batch first;
// addend (N, H, L, S) is each score's mask term (-inf: not allowed). A query
// with no key left gets zero weights.
Reference attention_by_loops(const nn::MultiheadAttention& m, const Tensor& query, const Tensor& key,
                             const Tensor& value, const std::vector<double>& addend) {
  const Weights w = weights_of(m);
  const int64_t n = query.size(0), l = query.size(1), s = key.size(1), e = m.embed_dim(), h = m.num_heads();
  const int64_t d = e / h, kdim = key.size(2), vdim = value.size(2);
  std::vector<double> out(static_cast<size_t>(n * l * e)), probs(static_cast<size_t>(n * h * l * s));
  const std::vector<double> qv = values(query), kv = values(key), vv = values(value);
  for (int64_t b = 0; b < n; ++b) {
    auto rows = [](const std::vector<double>& all, int64_t at, int64_t count) {
      return std::vector<double>(all.begin() + at, all.begin() + at + count);
    };
    const std::vector<double> q = affine(rows(qv, b * l * e, l * e), l, e, w.q, e, w.bq);
    const std::vector<double> k = affine(rows(kv, b * s * kdim, s * kdim), s, kdim, w.k, e, w.bk);
    const std::vector<double> v = affine(rows(vv, b * s * vdim, s * vdim), s, vdim, w.v, e, w.bv);
    std::vector<double> heads(static_cast<size_t>(l * e), 0.0);
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t i = 0; i < l; ++i) {
        std::vector<double> p(static_cast<size_t>(s));
        double top = -INFINITY, total = 0;
        for (int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (int64_t c = hh * d; c < (hh + 1) * d; ++c) dot += q[i * e + c] * k[j * e + c];
          const size_t at = static_cast<size_t>(((b * h + hh) * l + i) * s + j);
          p[j] = dot / std::sqrt(static_cast<double>(d)) + addend[at];
          top = std::max(top, p[j]);
        }
        for (int64_t j = 0; j < s; ++j) total += (p[j] = top == -INFINITY ? 0.0 : std::exp(p[j] - top));
        for (int64_t j = 0; j < s; ++j) {
          const double weight = total == 0 ? 0.0 : p[j] / total;
          probs[static_cast<size_t>(((b * h + hh) * l + i) * s + j)] = weight;
          for (int64_t c = hh * d; c < (hh + 1) * d; ++c) heads[i * e + c] += weight * v[j * e + c];
        }
      }
    }
    const std::vector<double> y = affine(heads, l, e, w.out, e, w.out_bias);
    std::copy(y.begin(), y.end(), out.begin() + b * l * e);
  }
  return {tensor(out, {n, l, e}, {.dtype = DType::Float64}), tensor(probs, {n, h, l, s}, {.dtype = DType::Float64})};
}

struct Masks {
  Tensor attn_mask, key_padding_mask;
  bool is_causal = false;
};

// The addend (N, H, L, S) that torch.nn's masks stand for: true (not allowed)
// is -inf, a floating mask is added, is_causal without attn_mask hides j > i.
std::vector<double> addend_of(const Masks& masks, int64_t n, int64_t h, int64_t l, int64_t s) {
  std::vector<double> add(static_cast<size_t>(n * h * l * s), 0.0);
  auto term = [](const Tensor& t, double v) { return t.dtype() == DType::Bool ? (v != 0 ? -INFINITY : 0.0) : v; };
  const std::vector<double> attn = masks.attn_mask.defined() ? values(masks.attn_mask) : std::vector<double>();
  const std::vector<double> pad =
      masks.key_padding_mask.defined() ? values(masks.key_padding_mask) : std::vector<double>();
  const bool per_head = masks.attn_mask.defined() && masks.attn_mask.dim() == 3;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t i = 0; i < l; ++i) {
        for (int64_t j = 0; j < s; ++j) {
          double& a = add[static_cast<size_t>(((b * h + hh) * l + i) * s + j)];
          const size_t at = static_cast<size_t>(((per_head ? b * h + hh : 0) * l + i) * s + j);
          if (!attn.empty()) a += term(masks.attn_mask, attn[at]);
          if (!pad.empty()) a += term(masks.key_padding_mask, pad[static_cast<size_t>(b * s + j)]);
          if (masks.is_causal && attn.empty() && j > i) a = -INFINITY;
        }
      }
    }
  }
  return add;
}

Tensor random_mask(const Shape& shape, bool boolean, Generator& gen) {
  const Tensor u = rand(shape, {.dtype = DType::Float64}, &gen);
  if (boolean) return u < 0.3;  // true: not allowed
  return masked_fill(randn(shape, {.dtype = DType::Float64}, &gen), u < 0.15, -INFINITY);
}

TEST_CASE("MultiheadAttention matches torch.nn's definition on random configurations, masks and layouts") {
  std::mt19937 rng(81);
  Generator gen(81);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 80; ++trial) {
    CAPTURE(trial);
    const int64_t h = pick(1, 3), e = h * pick(1, 3), l = pick(1, 5), n = pick(1, 3);
    const bool self = trial % 4 == 0, batched = trial % 5 != 0, batch_first = pick(0, 1) == 1;
    const int64_t s = self ? l : pick(1, 5), kdim = self || pick(0, 1) ? e : pick(1, 4);
    const int64_t vdim = self || pick(0, 1) ? e : pick(1, 4), rows = batched ? n : 1;
    nn::MultiheadAttention m(e, h, {.bias = pick(0, 3) != 0, .kdim = kdim, .vdim = vdim, .batch_first = batch_first,
                                    .generator = &gen});
    m.to(DType::Float64);
    const TensorOptions o{.dtype = DType::Float64};
    const Tensor query = randn({rows, l, e}, o, &gen);  // batch first here
    const Tensor key = self ? query : randn({rows, s, kdim}, o, &gen);
    const Tensor value = self ? query : randn({rows, s, vdim}, o, &gen);
    Masks masks;
    const int64_t attn_kind = pick(0, 4), pad_kind = pick(0, 2);
    if (attn_kind == 1 || attn_kind == 2) masks.attn_mask = random_mask({l, s}, attn_kind == 1, gen);
    if (attn_kind == 3) masks.attn_mask = random_mask({rows * h, l, s}, true, gen);
    if (attn_kind == 4) masks.is_causal = true;
    if (pad_kind != 0) masks.key_padding_mask = random_mask({rows, s}, pad_kind == 1, gen);
    const Reference want = attention_by_loops(m, query, key, value, addend_of(masks, rows, h, l, s));
    // The module's own layout: (L, N, E) unless batch_first, (L, E) unbatched.
    auto laid_out = [&](const Tensor& t) { return !batched ? t.squeeze(0) : batch_first ? t : t.transpose(0, 1); };
    const nn::AttentionCall call{
        .key_padding_mask = batched || !masks.key_padding_mask.defined() ? masks.key_padding_mask
                                                                          : masks.key_padding_mask.squeeze(0),
        .need_weights = trial % 3 != 0,
        .attn_mask = masks.attn_mask,
        .average_attn_weights = trial % 2 == 0,
        .is_causal = masks.is_causal};
    const Tensor q_in = laid_out(query);
    const nn::AttentionOutput got =
        self ? m(q_in, q_in, q_in, call) : m(q_in, laid_out(key), laid_out(value), call);
    CHECK_CLOSE(got.output, laid_out(want.output), 1e-10, 1e-10);
    CHECK(got.weights.defined() == call.need_weights);
    if (call.need_weights) {
      Tensor w = call.average_attn_weights ? mean(want.weights, {1}) : want.weights;
      CHECK_CLOSE(got.weights, batched ? w : w.squeeze(0), 1e-10, 1e-10);
    }
  }
}

TEST_CASE("MultiheadAttention as a one-tensor module is self-attention's output; it passes float64 gradcheck") {
  Generator gen(82);
  nn::MultiheadAttention m(6, 2, {.batch_first = true, .generator = &gen});
  m.to(DType::Float64);
  const Tensor x = randn({2, 4, 6}, {.dtype = DType::Float64}, &gen);
  CHECK_CLOSE(m(x), m(x, x, x).output, 0, 0);
  const Tensor pad = tensor({0, 0, 1, 1, 0, 1, 1, 1}, {2, 4}, {.dtype = DType::Bool});
  const Tensor q = randn({2, 3, 6}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
  const Tensor kv = randn({2, 4, 6}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return m(in[0], in[1], in[1], {.key_padding_mask = pad, .need_weights = false}).output;
      },
      {q, kv});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("MultiheadAttention has torch.nn's parameter names, shapes and initialisation") {
  Generator gen(83);
  nn::MultiheadAttention m(8, 2, {.generator = &gen});
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name + " " + shape_str(p.sizes()));
  CHECK(names == std::vector<std::string>{"in_proj_weight (24, 8)", "in_proj_bias (24,)", "out_proj.weight (8, 8)",
                                          "out_proj.bias (8,)"});
  CHECK(max(abs(m.named_parameters()[1].second)).item() == 0);
  CHECK(max(abs(m.named_parameters()[3].second)).item() == 0);
  const double bound = std::sqrt(6.0 / (8 + 24));  // Xavier-uniform over the stacked (3E, E)
  CHECK(max(abs(m.named_parameters()[0].second)).item() <= bound);
  CHECK(max(abs(m.named_parameters()[0].second)).item() > 0.8 * bound);
  nn::MultiheadAttention kv(8, 4, {.bias = false, .kdim = 5, .vdim = 3});
  CHECK(testing::state_dict_names(kv) ==
        std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});
  CHECK(kv.str().find("MultiheadAttention(\n  embed_dim=8, num_heads=4, bias=False, kdim=5, vdim=3\n  (out_proj)") !=
        std::string::npos);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  CHECK(testing::state_dict_names(layer) ==
        std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                 "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                 "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
}

TEST_CASE("MultiheadAttention drops attention weights in training only") {
  Generator gen(84);
  nn::MultiheadAttention m(8, 2, {.dropout = 0.5, .batch_first = true, .generator = &gen});
  nn::MultiheadAttention plain(8, 2, {.batch_first = true});
  plain.load_state_dict(m.state_dict());
  const Tensor x = randn({2, 5, 8}, {}, &gen);
  m.eval();
  CHECK_CLOSE(m(x, x, x).output, plain(x, x, x).output, 0, 0);
  m.train();
  const nn::AttentionOutput dropped = m(x, x, x, {.average_attn_weights = false});
  CHECK(any(eq(dropped.weights, 0.0)).item() != 0);
  CHECK(max(abs(sub(dropped.output, plain(x, x, x).output))).item() > 1e-3);
}

// A transformer layer's feed-forward block and norms, from its parameters by
// torch.nn's names (linear1, linear2, norm1, ...).
class LayerParts {
 public:
  LayerParts(const nn::Module& layer, kernel::ActivationKind act) : act_(act) {
    for (const auto& [name, t] : layer.named_parameters()) p_[name] = t;
  }
  Tensor feed_forward(const Tensor& t) const {
    return linear(activation(linear(t, at("linear1.weight"), at("linear1.bias")), act_), at("linear2.weight"),
                  at("linear2.bias"));
  }
  Tensor norm(const Tensor& t, const std::string& which) const {
    return layer_norm(t, {t.size(-1)}, at(which + ".weight"), at(which + ".bias"), 1e-5);
  }

 private:
  const Tensor& at(const std::string& name) const { return p_.at(name); }

  std::map<std::string, Tensor> p_;
  kernel::ActivationKind act_;
};

// torch.nn.TransformerEncoderLayer's forward, from the module's parts: the
// attention by the loops above, the rest by Loom's ops; dropout off (eval).
Tensor encoder_by_parts(nn::TransformerEncoderLayer& layer, const Tensor& x, const Masks& masks, bool norm_first,
                        kernel::ActivationKind act, int64_t heads) {
  auto& attention = dynamic_cast<nn::MultiheadAttention&>(*layer.named_children()[0].second);
  const int64_t n = x.size(0), l = x.size(1);
  auto sa = [&](const Tensor& t) {
    return attention_by_loops(attention, t, t, t, addend_of(masks, n, heads, l, l)).output;
  };
  const LayerParts parts{layer, act};
  auto ff = [&](const Tensor& t) { return parts.feed_forward(t); };
  auto norm = [&](const Tensor& t, const std::string& which) { return parts.norm(t, which); };
  if (norm_first) {
    const Tensor h = add(x, sa(norm(x, "norm1")));
    return add(h, ff(norm(h, "norm2")));
  }
  const Tensor h = norm(add(x, sa(x)), "norm1");
  return norm(add(h, ff(h)), "norm2");
}

TEST_CASE("TransformerEncoderLayer matches torch.nn's definition: post- and pre-norm, ReLU and GELU, masks") {
  Generator gen(85);
  for (int trial = 0; trial < 8; ++trial) {
    CAPTURE(trial);
    const bool norm_first = trial % 2 == 1, batch_first = trial % 4 < 2;
    const auto act = trial < 4 ? kernel::ActivationKind::Relu : kernel::ActivationKind::Gelu;
    nn::TransformerEncoderLayer layer(
        6, 3, {.dim_feedforward = 10, .activation = act, .batch_first = batch_first, .norm_first = norm_first,
               .generator = &gen});
    layer.to(DType::Float64).eval();
    const Tensor x = randn({2, 5, 6}, {.dtype = DType::Float64}, &gen);  // batch first
    Masks masks{.key_padding_mask = trial % 3 == 0 ? random_mask({2, 5}, true, gen) : Tensor(),
                .is_causal = trial % 3 != 2};
    const Tensor want = encoder_by_parts(layer, x, masks, norm_first, act, 3);
    const Tensor in = batch_first ? x : x.transpose(0, 1);
    const Tensor got = layer(in, {.src_key_padding_mask = masks.key_padding_mask, .is_causal = masks.is_causal});
    CHECK_CLOSE(batch_first ? got : got.transpose(0, 1), want, 1e-10, 1e-10);
  }
}

TEST_CASE("TransformerEncoder stacks copies of its layer, as torch.nn's deep copies, then its norm") {
  Generator gen(88);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 12, .batch_first = true, .generator = &gen});
  layer.to(DType::Float64).eval();
  nn::TransformerEncoder encoder(layer, 2, std::make_shared<nn::LayerNorm>(Shape{8}));
  encoder.to(DType::Float64).eval();
  const std::vector<std::string> names = testing::state_dict_names(encoder);
  CHECK(names.size() == 2 * 12 + 2);
  CHECK(names.front() == "layers.0.self_attn.in_proj_weight");
  CHECK(names[12] == "layers.1.self_attn.in_proj_weight");
  CHECK(names.back() == "norm.bias");
  const Tensor x = randn({3, 5, 8}, {.dtype = DType::Float64}, &gen);
  const nn::EncoderCall call{.is_causal = true};
  const Tensor twice = layer(layer(x, call), call);
  CHECK_CLOSE(encoder(x, call), layer_norm(twice, {8}, Tensor(), Tensor()), 1e-12, 1e-12);
  // The copies own their weights: changing one leaves the layer and the other copy as they were.
  auto named = [](const nn::Module& m, const std::string& name) {
    for (const auto& [key, t] : m.state_dict()) {
      if (key == name) return t;
    }
    FAIL("no ", name);
    return Tensor();
  };
  Tensor first = named(encoder, "layers.0.linear1.weight");
  first.fill_(0.5);
  const Tensor original = named(layer, "linear1.weight");
  CHECK(max(abs(sub(named(encoder, "layers.1.linear1.weight"), original))).item() == 0);
  CHECK(max(abs(sub(original, 0.5))).item() > 0);
}

// torch.nn.TransformerDecoderLayer's forward from its parts, batch first, dropout
// off: self-attention under `self_masks`, attention to memory under
// `memory_masks`, the feed-forward block; post-norm unless norm_first.
Tensor decoder_by_parts(nn::TransformerDecoderLayer& layer, const Tensor& x, const Tensor& memory,
                        const Masks& self_masks, const Masks& memory_masks, bool norm_first,
                        kernel::ActivationKind act, int64_t heads) {
  auto& self_attn = dynamic_cast<nn::MultiheadAttention&>(*layer.named_children()[0].second);
  auto& cross_attn = dynamic_cast<nn::MultiheadAttention&>(*layer.named_children()[1].second);
  const int64_t n = x.size(0), l = x.size(1), s = memory.size(1);
  auto sa = [&](const Tensor& t) {
    return attention_by_loops(self_attn, t, t, t, addend_of(self_masks, n, heads, l, l)).output;
  };
  auto ca = [&](const Tensor& t) {
    return attention_by_loops(cross_attn, t, memory, memory, addend_of(memory_masks, n, heads, l, s)).output;
  };
  const LayerParts parts{layer, act};
  auto ff = [&](const Tensor& t) { return parts.feed_forward(t); };
  auto norm = [&](const Tensor& t, const std::string& which) { return parts.norm(t, which); };
  if (norm_first) {
    const Tensor h = add(x, sa(norm(x, "norm1")));
    const Tensor g = add(h, ca(norm(h, "norm2")));
    return add(g, ff(norm(g, "norm3")));
  }
  const Tensor h = norm(add(x, sa(x)), "norm1");
  const Tensor g = norm(add(h, ca(h)), "norm2");
  return norm(add(g, ff(g)), "norm3");
}

TEST_CASE("TransformerDecoderLayer matches torch.nn's definition: self and memory masks, post- and pre-norm") {
  std::mt19937 rng(89);
  Generator gen(89);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 24; ++trial) {
    CAPTURE(trial);
    const bool norm_first = pick(0, 1) == 1, batch_first = pick(0, 1) == 1;
    const auto act = pick(0, 1) ? kernel::ActivationKind::Relu : kernel::ActivationKind::Gelu;
    const int64_t h = pick(1, 3), e = h * pick(1, 3), n = pick(1, 3), l = pick(1, 6), s = pick(1, 6);
    nn::TransformerDecoderLayer layer(e, h, {.dim_feedforward = pick(1, 12), .activation = act,
                                             .batch_first = batch_first, .norm_first = norm_first, .generator = &gen});
    layer.to(DType::Float64).eval();
    const Tensor x = randn({n, l, e}, {.dtype = DType::Float64}, &gen);  // batch first here
    const Tensor memory = randn({n, s, e}, {.dtype = DType::Float64}, &gen);
    Masks self_masks, memory_masks;
    const int64_t self_kind = pick(0, 3), memory_kind = pick(0, 3);
    if (self_kind == 1) self_masks.is_causal = true;
    if (self_kind == 2) self_masks.attn_mask = random_mask({l, l}, pick(0, 1) == 1, gen);
    if (self_kind == 3) self_masks.attn_mask = nn::generate_square_subsequent_mask(l, {.dtype = DType::Float64});
    if (pick(0, 1)) self_masks.key_padding_mask = random_mask({n, l}, true, gen);
    if (memory_kind == 1) memory_masks.is_causal = true;
    if (memory_kind == 2) memory_masks.attn_mask = random_mask({l, s}, pick(0, 1) == 1, gen);
    if (memory_kind != 3) memory_masks.key_padding_mask = random_mask({n, s}, pick(0, 1) == 1, gen);
    const Tensor want = decoder_by_parts(layer, x, memory, self_masks, memory_masks, norm_first, act, h);
    auto laid_out = [&](const Tensor& t) { return batch_first ? t : t.transpose(0, 1); };
    const nn::DecoderCall call{.tgt_mask = self_masks.attn_mask,
                               .memory_mask = memory_masks.attn_mask,
                               .tgt_key_padding_mask = self_masks.key_padding_mask,
                               .memory_key_padding_mask = memory_masks.key_padding_mask,
                               .tgt_is_causal = self_masks.is_causal,
                               .memory_is_causal = memory_masks.is_causal};
    CHECK_CLOSE(laid_out(layer(laid_out(x), laid_out(memory), call)), want, 1e-10, 1e-10);
  }
}

TEST_CASE("TransformerDecoderLayer passes float64 gradcheck through the target and the memory") {
  Generator gen(90);
  for (const bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    nn::TransformerDecoderLayer layer(4, 2, {.dim_feedforward = 6, .activation = kernel::ActivationKind::Gelu,
                                             .batch_first = true, .norm_first = norm_first, .generator = &gen});
    layer.to(DType::Float64).eval();
    const Tensor x = randn({2, 3, 4}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
    const Tensor memory = randn({2, 5, 4}, {.dtype = DType::Float64}, &gen).requires_grad_(true);
    const Tensor padding = tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5}, {.dtype = DType::Bool});
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return layer(in[0], in[1], {.memory_key_padding_mask = padding, .tgt_is_causal = true});
        },
        {x, memory});
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("Transformer is torch.nn's: names, Xavier-drawn matrices, the encoder's memory feeding the decoder") {
  Generator gen(91);
  nn::Transformer model({.d_model = 8, .nhead = 2, .num_encoder_layers = 2, .num_decoder_layers = 1,
                         .dim_feedforward = 12, .dropout = 0.0, .generator = &gen});
  model.to(DType::Float64).eval();
  const std::vector<std::string> names = testing::state_dict_names(model);
  // An encoder layer holds 12 tensors, a decoder layer 18 (a second attention, a third norm), each norm 2.
  CHECK(names.size() == 2 * 12 + 2 + 18 + 2);
  CHECK(names.front() == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(names[26] == "decoder.layers.0.self_attn.in_proj_weight");
  CHECK(names[30] == "decoder.layers.0.multihead_attn.in_proj_weight");
  CHECK(names.back() == "decoder.norm.bias");
  // Every matrix drawn anew within Xavier's bound sqrt(6 / (fan_in + fan_out)); the copies differ.
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : model.named_parameters()) p[name] = t;
  for (const auto& [name, t] : p) {
    if (t.dim() < 2) continue;
    CAPTURE(name);
    CHECK(max(abs(t)).item() <= std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1))));
  }
  CHECK(max(abs(sub(p["encoder.layers.0.linear1.weight"], p["encoder.layers.1.linear1.weight"]))).item() > 0);
  CHECK(max(abs(p["encoder.layers.0.linear1.bias"])).item() > 0);  // vectors keep Linear's draw
  // (S, N, E) and (L, N, E): the decoder reads the encoder's normed output.
  const Tensor src = randn({5, 2, 8}, {.dtype = DType::Float64}, &gen);
  const Tensor tgt = randn({4, 2, 8}, {.dtype = DType::Float64}, &gen);
  const Tensor src_padding = tensor({0, 0, 0, 1, 1, 0, 0, 0, 0, 0}, {2, 5}, {.dtype = DType::Bool});
  const Tensor memory = model.encoder()(src, {.src_key_padding_mask = src_padding});
  const Tensor want = model.decoder()(tgt, memory, {.memory_key_padding_mask = src_padding, .tgt_is_causal = true});
  const Tensor got = model(src, tgt, {.src_key_padding_mask = src_padding, .memory_key_padding_mask = src_padding,
                                      .tgt_is_causal = true});
  CHECK(got.sizes() == Shape{4, 2, 8});
  CHECK_CLOSE(got, want, 1e-12, 1e-12);
  // torch.nn's added causal mask hides what tgt_is_causal hides.
  const Tensor masked = model(src, tgt, {.tgt_mask = nn::generate_square_subsequent_mask(4, {.dtype = DType::Float64}),
                                         .src_key_padding_mask = src_padding,
                                         .memory_key_padding_mask = src_padding});
  CHECK_CLOSE(masked, got, 1e-12, 1e-12);
  CHECK(values(nn::generate_square_subsequent_mask(3)) ==
        std::vector<double>{0, -INFINITY, -INFINITY, 0, 0, -INFINITY, 0, 0, 0});
}

TEST_CASE("Transformer draws every parameter, biases included, from the generator it is given") {
  auto build = [](uint64_t seed) {
    Generator gen(seed);
    (void)randn({16});  // the default generator moves between the builds; a seeded build must not notice
    return std::make_shared<nn::Transformer>(nn::TransformerOptions{
        .d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1, .dim_feedforward = 12,
        .generator = &gen});
  };
  const auto a = build(92), b = build(92), c = build(93);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(values(pa[i].second) == values(pb[i].second));
  }
  const auto bias = [](const auto& named) {
    for (const auto& [name, t] : named) {
      if (name == "decoder.layers.0.linear2.bias") return values(t);
    }
    FAIL("no decoder.layers.0.linear2.bias");
    return std::vector<double>{};
  };
  CHECK(bias(pa) != bias(pc));
}

TEST_CASE("Transformer runs a custom encoder and decoder in place of the stacks its options would build") {
  Generator gen(94);
  const nn::TransformerLayerOptions layer{.dim_feedforward = 6, .dropout = 0.0, .generator = &gen};
  // Three encoder layers of 4 heads and no final norm; two decoder layers: not what the options say.
  auto encoder = std::make_shared<nn::TransformerEncoder>(nn::TransformerEncoderLayer(8, 4, layer), 3);
  auto decoder = std::make_shared<nn::TransformerDecoder>(nn::TransformerDecoderLayer(8, 2, layer), 2);
  const Tensor before = encoder->named_parameters().front().second.clone();
  nn::Transformer model({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                         .dim_feedforward = 12, .dropout = 0.0, .generator = &gen, .custom_encoder = encoder,
                         .custom_decoder = decoder});
  CHECK(&model.encoder() == encoder.get());
  CHECK(&model.decoder() == decoder.get());
  const std::vector<std::string> names = testing::state_dict_names(model);
  CHECK(names.size() == 3 * 12 + 2 * 18);  // no norms: the custom stacks were built without
  CHECK(names.front() == "encoder.layers.0.self_attn.in_proj_weight");
  CHECK(names[3 * 12] == "decoder.layers.0.self_attn.in_proj_weight");
  CHECK(names.back() == "decoder.layers.1.norm3.bias");
  // The custom stacks' matrices are drawn again, within Xavier's bound.
  CHECK(max(abs(sub(encoder->named_parameters().front().second, before))).item() > 0);
  for (const auto& [name, t] : model.named_parameters()) {
    CAPTURE(name);
    if (t.dim() > 1) CHECK(max(abs(t)).item() <= std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1))));
  }
  model.to(DType::Float64).eval();
  const Tensor src = randn({5, 2, 8}, {.dtype = DType::Float64}, &gen);
  const Tensor tgt = randn({4, 2, 8}, {.dtype = DType::Float64}, &gen);
  const Tensor want = (*decoder)(tgt, (*encoder)(src, nn::EncoderCall{}), {.tgt_is_causal = true});
  CHECK_CLOSE(model(src, tgt, {.tgt_is_causal = true}), want, 1e-12, 1e-12);
}

TEST_CASE("TransformerDecoder and Transformer name what is wrong") {
  nn::Transformer model({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                         .dim_feedforward = 8});
  CHECK_THROWS_WITH_FRAGMENT(model(zeros({5, 2, 8}), zeros({4, 3, 8})), ShapeError, "with one batch size");
  CHECK_THROWS_WITH_FRAGMENT(model(zeros({5, 2, 8}), zeros({4, 8})), ShapeError, "got shapes (5, 2, 8) and (4, 8)");
  CHECK_THROWS_WITH_FRAGMENT(model(zeros({5, 2, 6}), zeros({4, 2, 6})), ShapeError, "d_model = 8 features");
  CHECK(model(zeros({5, 8}), zeros({4, 8})).sizes() == Shape{4, 8});  // unbatched
  CHECK_THROWS_WITH_FRAGMENT(nn::TransformerDecoder(nn::TransformerDecoderLayer(8, 2), 0), ValueError,
                             "num_layers must be >= 1");
  CHECK_THROWS_WITH_FRAGMENT(nn::TransformerDecoderLayer(8, 3), ValueError, "embed_dim 8 must split evenly");
  nn::TransformerDecoderLayer layer(8, 2);
  CHECK_THROWS_WITH_FRAGMENT(layer(zeros({4, 2, 8})), TypeError, "has no forward(const Tensor&)");
  CHECK_THROWS_WITH_FRAGMENT(layer(zeros({4, 2, 8}), zeros({5, 3, 8})), ShapeError, "with one batch");
  CHECK_THROWS_WITH_FRAGMENT(nn::generate_square_subsequent_mask(3, {.dtype = DType::Bool}), TypeError,
                             "added (floating) mask");
}

TEST_CASE("MultiheadAttention and TransformerEncoderLayer name what is wrong") {
  CHECK_THROWS_WITH_FRAGMENT(nn::MultiheadAttention(10, 3), ValueError, "embed_dim 10 must split evenly");
  CHECK_THROWS_WITH_FRAGMENT(nn::MultiheadAttention(8, 2, {.dropout = 1.0}), ValueError, "dropout must be in");
  CHECK_THROWS_WITH_FRAGMENT(nn::TransformerEncoderLayer(8, 2, {.activation = kernel::ActivationKind::Tanh}),
                             ValueError, "Relu or Gelu");
  CHECK_THROWS_WITH_FRAGMENT(nn::TransformerEncoder(nn::TransformerEncoderLayer(8, 2), 0), ValueError,
                             "num_layers must be >= 1");
  nn::MultiheadAttention m(8, 2);
  const Tensor x = zeros({5, 2, 8});  // (L, N, E)
  CHECK(m(x, x, x).output.sizes() == Shape{5, 2, 8});
  CHECK_THROWS_WITH_FRAGMENT(m(zeros({5, 2, 7}), x, x), ShapeError, "query (.., 8)");
  CHECK_THROWS_WITH_FRAGMENT(m(zeros({1, 5, 2, 8}), x, x), ShapeError, "all 3-d (L, N, E)");
  CHECK_THROWS_WITH_FRAGMENT(m(x, x, x, {.attn_mask = zeros({5, 4})}), ShapeError,
                             "attn_mask must be (L, S) = (5, 5)");
  CHECK_THROWS_WITH_FRAGMENT(m(x, x, x, {.key_padding_mask = zeros({5, 2})}), ShapeError,
                             "key_padding_mask must be (N, S) = (2, 5)");
  CHECK_THROWS_WITH_FRAGMENT(m(x, x, x, {.attn_mask = zeros({5, 5}, {.dtype = DType::Int64})}), TypeError,
                             "attn_mask must be Bool (true = that position is not attended");
}

// The first and the last loss of `steps` Adam steps, each on a new `loss()`.
std::pair<double, double> adam_losses(const std::vector<Tensor>& parameters, double lr, int steps,
                                      const std::function<Tensor()>& loss) {
  optim::Adam adam(parameters, {.lr = lr});
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    const Tensor l = loss();
    adam.zero_grad();
    l.backward();
    adam.step();
    (step == 0 ? first : last) = l.item();
  }
  return {first, last};
}

// A decoder-only model as a user writes one: token and position embeddings, a
// causal TransformerEncoderLayer, a linear head over the vocabulary.
class TinyDecoder : public nn::Module {
 public:
  TinyDecoder(int64_t vocab, int64_t length, int64_t width) {
    tokens_ = register_module("tokens", nn::Embedding(vocab, width));
    positions_ = register_parameter("positions", mul(randn({length, width}), 0.1));
    block_ = register_module("block", nn::TransformerEncoderLayer(width, 2, {.dim_feedforward = 2 * width,
                                                                             .dropout = 0.0,
                                                                             .batch_first = true}));
    head_ = register_module("head", nn::Linear(width, vocab));
  }
  Tensor forward(const Tensor& ids) override {  // (N, L) int64 -> (N, L, vocab)
    return (*head_)((*block_)(add((*tokens_)(ids), positions_), {.is_causal = true}));
  }

 private:
  std::shared_ptr<nn::Embedding> tokens_;
  Tensor positions_;
  std::shared_ptr<nn::TransformerEncoderLayer> block_;
  std::shared_ptr<nn::Linear> head_;
};

TEST_CASE("a small causal transformer learns to repeat the previous token, which it can only see by attending") {
  manual_seed(86);
  constexpr int64_t kVocab = 8, kLength = 10, kBatch = 32;
  TinyDecoder model(kVocab, kLength, 32);
  Generator data(87);
  const auto [first, last] = adam_losses(model.parameters(), 1e-2, 150, [&] {
    const Tensor ids = randint(0, kVocab, {kBatch, kLength}, {.dtype = DType::Int64}, &data);
    // Position i predicts the token at i - 1: the causal mask hides every later one.
    const Tensor logits = model(ids).narrow(1, 1, kLength - 1).reshape({-1, kVocab});
    return cross_entropy(logits, ids.narrow(1, 0, kLength - 1).reshape({-1}));
  });
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 1.8);  // about log(8): chance
  CHECK(last < 0.2);
}

// A sequence-to-sequence model as a user writes one: shared token embeddings
// with learned positions, nn::Transformer, a linear head; the decoder reads the
// target shifted right behind a start token (teacher forcing).
class Reverser : public nn::Module {
 public:
  Reverser(int64_t vocab, int64_t length, int64_t width) {
    tokens_ = register_module("tokens", nn::Embedding(vocab + 1, width));  // token `vocab` starts the target
    positions_ = register_parameter("positions", mul(randn({length, width}), 0.1));
    transformer_ = register_module("transformer", nn::Transformer({.d_model = width, .nhead = 2,
                                                                   .num_encoder_layers = 1, .num_decoder_layers = 1,
                                                                   .dim_feedforward = 2 * width, .dropout = 0.0,
                                                                   .batch_first = true}));
    head_ = register_module("head", nn::Linear(width, vocab));
  }
  Tensor forward(const Tensor& src, const Tensor& tgt_in) {  // (N, S), (N, L) int64 -> (N, L, vocab)
    auto embed = [&](const Tensor& ids) { return add((*tokens_)(ids), positions_.narrow(0, 0, ids.size(1))); };
    return (*head_)((*transformer_)(embed(src), embed(tgt_in), {.tgt_is_causal = true}));
  }

 private:
  std::shared_ptr<nn::Embedding> tokens_;
  Tensor positions_;
  std::shared_ptr<nn::Transformer> transformer_;
  std::shared_ptr<nn::Linear> head_;
};

TEST_CASE("a small nn::Transformer learns to reverse its source, which its decoder sees only through memory") {
  manual_seed(92);
  constexpr int64_t kVocab = 6, kLength = 6, kBatch = 32;
  Reverser model(kVocab, kLength, 32);
  Generator data(93);
  const Tensor start = full({kBatch, 1}, static_cast<double>(kVocab), {.dtype = DType::Int64});
  const auto [first, last] = adam_losses(model.parameters(), 3e-3, 200, [&] {
    const Tensor src = randint(0, kVocab, {kBatch, kLength}, {.dtype = DType::Int64}, &data);
    const Tensor reversed = flip(src, {1});
    const Tensor tgt_in = cat({start, reversed.narrow(1, 0, kLength - 1)}, 1);
    return cross_entropy(model.forward(src, tgt_in).reshape({-1, kVocab}), reversed.reshape({-1}));
  });
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 1.5);  // about log(6): chance
  CHECK(last < 0.2);
}

}  // namespace
}  // namespace loom
