// File: core/ops/attention.cc
// scaled_dot_product_attention: the arguments checked, the fused GPU kernels
// (core/cuda/attention.h) with their backward beside them, and matmul, softmax,
// matmul (with the mask and the dropout) for what they do not take.
//
// L query rows, S key rows, E the query/key width, F the value width.
#include "core/ops/attention.h"

#include <fmt/format.h>

#include <cmath>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cuda/attention.h"
#include "core/error.h"
#include "core/kernel/attention.h"
#include "core/ops/compare.h"
#include "core/ops/dispatch.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/ops/softmax.h"
#include "core/trace.h"

namespace loom {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  check_float_tensor(q, op, "q");
  check_float_tensor(k, op, "k");
  check_float_tensor(v, op, "v");
  LOOM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), TypeError,
             "[{}] q, k and v must share a dtype, got {}, {} and {}", op, dtype_name(q.dtype()),
             dtype_name(k.dtype()), dtype_name(v.dtype()));
  LOOM_CHECK(q.device() == k.device() && q.device() == v.device(), DeviceError,
             "[{}] q, k and v must be on one device, got {}, {} and {}", op, q.device().str(), k.device().str(),
             v.device().str());
  LOOM_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError,
             "[{}] q, k and v must have the same number of dims, at least 2 ((..., L, E), (..., S, E), "
             "(..., S, F)), got shapes {}, {} and {}",
             op, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  const Shape batch(q.sizes().begin(), q.sizes().end() - 2);
  const bool same_batch = Shape(k.sizes().begin(), k.sizes().end() - 2) == batch &&
                          Shape(v.sizes().begin(), v.sizes().end() - 2) == batch;
  LOOM_CHECK(same_batch && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), ShapeError,
             "[{}] expects q (..., L, E), k (..., S, E) and v (..., S, F) with the same leading dims, got "
             "shapes {}, {} and {}; expand() a shared k or v to q's leading dims first",
             op, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
}

// The operand as the kernels take it: (B1, B2, rows, width) with a unit width stride.
Tensor kernel_view(const Tensor& t) {
  const Tensor dense = t.stride(-1) == 1 ? t : t.contiguous();
  return dense.dim() == 3 ? dense.unsqueeze(0) : dense;
}

// An uninitialized (B1, B2, rows, width) tensor laid out as (B1, rows, B2, width).
Tensor rows_outer(int64_t b1, int64_t b2, int64_t rows, int64_t width, const Tensor& like) {
  return empty({b1, rows, b2, width}, {.dtype = like.dtype(), .device = like.device()}).permute({0, 2, 1, 3});
}

bool runs_fused(const Tensor& q, const Tensor& k, const Tensor& v) {
  return q.device().is_cuda() && (q.dim() == 3 || q.dim() == 4) &&
         kernel::attention_fits({.L = q.size(-2), .S = k.size(-2), .E = q.size(-1), .F = v.size(-1)},
                                q.dtype() == DType::Float64);
}

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  DeviceGuard guard(q.device());
  const Tensor q4 = kernel_view(q).detach(), k4 = kernel_view(k).detach(), v4 = kernel_view(v).detach();
  const int64_t b1 = q4.size(0), b2 = q4.size(1);
  const Tensor y4 = rows_outer(b1, b2, q4.size(2), v4.size(3), q4);
  cuda::attention_forward(y4.strided(), q4.strided(), k4.strided(), v4.strided(), scale, causal);
  const bool three_d = q.dim() == 3;
  Tensor y = three_d ? y4.squeeze(0) : y4;
  if (needs_grad({q, k, v})) {
    record(kOp, {q, k, v}, y, [q4, k4, v4, scale, causal, three_d](const Tensor& dy) -> std::vector<Tensor> {
      DeviceGuard guard(q4.device());
      const Tensor dy4 = kernel_view(dy);
      const int64_t b1 = q4.size(0), b2 = q4.size(1);
      Tensor dq = rows_outer(b1, b2, q4.size(2), q4.size(3), q4);
      Tensor dk = rows_outer(b1, b2, k4.size(2), k4.size(3), k4);
      Tensor dv = rows_outer(b1, b2, v4.size(2), v4.size(3), v4);
      cuda::attention_backward(dq.strided(), dk.strided(), dv.strided(), dy4.strided(), q4.strided(),
                               k4.strided(), v4.strided(), scale, causal);
      if (three_d) return {dq.squeeze(0), dk.squeeze(0), dv.squeeze(0)};
      return {dq, dk, dv};
    }, {q4, k4, v4});
  }
  return y;
}

// The attn_mask as the scores take it: Bool as is, a floating mask in the scores' dtype.
Tensor checked_mask(const Tensor& mask, const Tensor& q, const Tensor& k, const AttentionOptions& o, const char* op) {
  LOOM_CHECK(!(o.is_causal && mask.defined()), ValueError,
             "[{}] takes attn_mask or is_causal, not both; fold the causal rule into the mask (tril)", op);
  if (!mask.defined()) return mask;
  LOOM_CHECK(mask.dtype() == DType::Bool || is_floating(mask.dtype()), TypeError,
             "[{}] attn_mask must be Bool (true = attend) or floating (added to the scores), got {}", op,
             dtype_name(mask.dtype()));
  LOOM_CHECK(mask.device() == q.device(), DeviceError, "[{}] attn_mask is on {}, q on {}; move it with .to()", op,
             mask.device().str(), q.device().str());
  Shape scores(q.sizes().begin(), q.sizes().end() - 1);
  scores.push_back(k.size(-2));
  bool broadcasts = mask.dim() <= static_cast<int64_t>(scores.size());
  for (int64_t i = 1; broadcasts && i <= mask.dim(); ++i) {
    const int64_t m = mask.size(-i), s = scores[scores.size() - static_cast<size_t>(i)];
    broadcasts = m == s || m == 1;
  }
  LOOM_CHECK(broadcasts, ShapeError, "[{}] attn_mask of shape {} does not broadcast to the scores' {} (..., L, S)",
             op, shape_str(mask.sizes()), shape_str(scores));
  return mask.dtype() == DType::Bool ? mask : mask.to(q.dtype());
}

// softmax over the last dim where a row whose scores are all -inf gets zeros
// (no key to attend to) instead of NaN, gradients included.
Tensor softmax_empty_rows_zero(const Tensor& scores) {
  const Tensor empty_rows = all(isneginf(scores), -1, /*keepdim=*/true);
  return masked_fill(softmax(masked_fill(scores, empty_rows, 0.0), -1), empty_rows, 0.0);
}

// dropout(softmax(q k^T * scale + mask)) from checked operands.
Tensor weights_of(const Tensor& q, const Tensor& k, const Tensor& mask, double scale, const AttentionOptions& o) {
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  Tensor blocked;  // Bool (.., L, S): true where a score does not take part
  if (o.is_causal) {
    blocked = causal_blocked(q.size(-2), k.size(-2), q.device());
  } else if (mask.defined() && mask.dtype() == DType::Bool) {
    blocked = logical_not(mask);
  }
  if (blocked.defined()) scores = masked_fill(scores, blocked, -INFINITY);
  if (mask.defined() && mask.dtype() != DType::Bool) scores = add(scores, mask);
  // A causal row always keeps key 0; a given mask may leave a row nothing.
  Tensor weights = mask.defined() ? softmax_empty_rows_zero(scores) : softmax(scores, -1);
  if (o.dropout_p > 0) weights = dropout(weights, o.dropout_p, /*training=*/true, o.generator);
  return weights;
}

// The options' checks; returns the scale and the mask as the scores take it.
std::pair<double, Tensor> checked_options(const Tensor& q, const Tensor& k, const AttentionOptions& o,
                                          const char* op) {
  const Tensor mask = checked_mask(o.attn_mask, q, k, o, op);
  const double s = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  LOOM_CHECK(std::isfinite(s), ValueError, "[{}] scale must be finite, got {}", op, s);
  LOOM_CHECK(o.dropout_p >= 0 && o.dropout_p < 1, ValueError, "[{}] dropout_p must be in [0, 1), got {}", op,
             o.dropout_p);
  return {s, mask};
}

void record_trace(trace::OpScope& trace, std::vector<Tensor> inputs, const Tensor& y, double scale,
                  const AttentionOptions& o) {
  // The mask is the input after q, k (and v): undefined when none, Bool or floating as given.
  inputs.push_back(o.attn_mask);
  trace.record(std::move(inputs), y,
               {{"scale", scale}, {"is_causal", int64_t{o.is_causal}}, {"dropout_p", o.dropout_p}});
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& options) {
  trace::OpScope trace(kOp);
  LOOM_CHECK(q_in.defined() && k_in.defined() && v_in.defined(), ValueError, "[{}] q, k and v must be defined",
             kOp);
  const Tensor q = autocast_operand(q_in), k = autocast_operand(k_in), v = autocast_operand(v_in);
  check_operands(q, k, v, kOp);
  const auto [s, mask] = checked_options(q, k, options, kOp);
  const bool fusible = !mask.defined() && options.dropout_p == 0 && runs_fused(q, k, v);
  const Tensor y = fusible ? fused(q, k, v, s, options.is_causal) : matmul(weights_of(q, k, mask, s, options), v);
  if (trace.recording()) record_trace(trace, {q_in, k_in, v_in}, y, s, options);
  return y;
}

Tensor attention_weights(const Tensor& q_in, const Tensor& k_in, const AttentionOptions& options) {
  trace::OpScope trace("attention_weights");
  LOOM_CHECK(q_in.defined() && k_in.defined(), ValueError, "[attention_weights] q and k must be defined");
  const Tensor q = autocast_operand(q_in), k = autocast_operand(k_in);
  // k stands in for v: the checks of q against k are the ones that apply.
  check_operands(q, k, k, "attention_weights");
  const auto [s, mask] = checked_options(q, k, options, "attention_weights");
  const Tensor w = weights_of(q, k, mask, s, options);
  if (trace.recording()) record_trace(trace, {q_in, k_in}, w, s, options);
  return w;
}

Tensor causal_blocked(int64_t l, int64_t s, Device device) {
  LOOM_CHECK(l >= 0 && s >= 0, ValueError, "[causal_blocked] lengths must be >= 0, got L {} and S {}", l, s);
  const TensorOptions index{.dtype = DType::Int64, .device = device};
  return gt(arange(s, index).unsqueeze(0), arange(l, index).unsqueeze(1));
}

}  // namespace loom
