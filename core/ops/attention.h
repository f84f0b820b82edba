// File: core/ops/attention.h
// Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention:
//
//   y = dropout(softmax(q k^T * scale + mask)) v,   scale = 1 / sqrt(E) unless given
//
// q (..., L, E), k (..., S, E), v (..., S, F) -> y (..., L, F); the leading dims
// are equal for all three (no broadcasting). Float32 and float64 (bfloat16 and
// float16 too on the GPU; under AutocastGuard, CUDA operands are cast to the
// autocast dtype first, as PyTorch's autocast casts them).
//
// The mask, as PyTorch's: a Bool attn_mask says which scores take part (true)
// and which do not (false: they become -inf); a floating attn_mask is added to
// the scores; either broadcasts to (..., L, S). is_causal lets query i see keys
// 0..i only (the mask tril(ones(L, S)), aligned at the top left, as PyTorch's);
// it and attn_mask exclude each other. A query row with no key left (every score
// -inf) gets zero weights, so its output and its gradients are zero, as
// PyTorch's math path returns since 2.5, not NaN. dropout_p drops attention
// weights whenever it is above zero (as PyTorch's functional form: pass 0 in
// evaluation; nn::MultiheadAttention does), from `generator` (the default when
// null), graph-safe as loom::dropout is.
//
// On the GPU, 3-d and 4-d attentions with no attn_mask (is_causal is fine), no
// dropout and operands that fit in one block's shared memory (core/kernel/attention.h: in float32 up to
// about L = S = 60 at E = F = 64, or 95 at E = F = 16) run as one kernel forward
// and one backward, computing in float32 (float64 for float64) without rounding
// the scores to a 16-bit dtype; the others, and the CPU, run matmul, softmax and
// matmul. A 4-d y (N, H, L, F) from the kernel is laid out as (N, L, H, F) in
// memory, as PyTorch's fused kernels lay it out, so that
// y.transpose(1, 2).reshape({N, L, H * F}) is a view.
//
//   Tensor y = loom::scaled_dot_product_attention(q, k, v);  // (N, H, L, E), (N, H, S, E), (N, H, S, F)
//   Tensor z = loom::scaled_dot_product_attention(q, k, v, {.is_causal = true});
#pragma once

#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace loom {

struct AttentionOptions {
  Tensor attn_mask;             // undefined: none; Bool (true = attend) or added to the scores
  double dropout_p = 0.0;       // in [0, 1)
  bool is_causal = false;       // query i attends keys 0..i (not with attn_mask)
  std::optional<double> scale;  // 1 / sqrt(E) unless given
  Generator* generator = nullptr;
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// The weights the attention multiplies v by: dropout(softmax(q k^T * scale +
// mask)), (..., L, S), with the same options and checks (q's width is E, as k's).
// scaled_dot_product_attention(q, k, v, o) computes matmul(attention_weights(q,
// k, o), v); nn::MultiheadAttention returns them with need_weights.
Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& options = {});

// The causal rule as a mask: Bool (L, S), true where key j lies past query i
// (j > i), the scores is_causal leaves out; logical_not of it is PyTorch's
// tril(ones(L, S)).
Tensor causal_blocked(int64_t l, int64_t s, Device device = Device::cpu());

}  // namespace loom
