// File: core/kernel/attention.h
// What the attention kernel (core/cuda/attention.cu) holds in one block's shared
// memory, and so which problems it takes: host arithmetic, shared with the op
// (core/ops/attention.cc), which runs the others as matmul and softmax.
//
// L query rows, S key rows, E the query/key width, F the value width. Each
// operand's rows are padded by one element in shared memory, so that threads
// reading a column of neighbouring rows hit different banks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::kernel {

struct AttentionShape {
  int64_t L = 0, S = 0, E = 0, F = 0;
};

// The most shared memory one block may take: within every GPU of sm_80 and later
// (sm_86 and sm_89 allow 99 KiB a block).
constexpr size_t kAttentionSharedLimit = size_t{96} << 10;

// Elements of shared memory the forward takes: q (L x E), k (S x E), v (S x F) and the
// probabilities (L x S), rows padded.
constexpr int64_t attention_forward_elements(const AttentionShape& s) {
  return s.L * (s.E + 1) + s.S * (s.E + 1) + s.S * (s.F + 1) + s.L * (s.S + 1);
}

// The backward's: the forward's, dy (L x F) and the score gradients (L x S).
constexpr int64_t attention_backward_elements(const AttentionShape& s) {
  return attention_forward_elements(s) + s.L * (s.F + 1) + s.L * (s.S + 1);
}

// Whether the kernels take the problem, computing in elements of compute_bytes.
constexpr bool attention_fits(const AttentionShape& s, size_t compute_bytes) {
  return s.L > 0 && s.S > 0 && s.E > 0 && s.F > 0 && s.L <= 1024 && s.S <= 1024 && s.E <= 1024 &&
         s.F <= 1024 &&
         static_cast<size_t>(attention_backward_elements(s)) * compute_bytes <= kAttentionSharedLimit;
}

}  // namespace loom::kernel
