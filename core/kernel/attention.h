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

// Where each tile lies in one block's shared memory, in elements: q (L x E), k (S x E),
// v (S x F) and the probabilities (L x S), which the forward takes; then dy (L x F) and
// the score gradients (L x S), which the backward adds. Rows are padded by one element.
struct AttentionTile {
  int64_t offset = 0, pitch = 0;
};
struct AttentionTiles {
  AttentionTile q, k, v, p, dy, dp;
  int64_t forward_elements = 0, backward_elements = 0;
};

constexpr AttentionTiles attention_tiles(const AttentionShape& s) {
  AttentionTiles t;
  int64_t next = 0;
  const auto carve = [&next](int64_t rows, int64_t width) {
    const AttentionTile tile{.offset = next, .pitch = width + 1};
    next += rows * (width + 1);
    return tile;
  };
  t.q = carve(s.L, s.E);
  t.k = carve(s.S, s.E);
  t.v = carve(s.S, s.F);
  t.p = carve(s.L, s.S);
  t.forward_elements = next;
  t.dy = carve(s.L, s.F);
  t.dp = carve(s.L, s.S);
  t.backward_elements = next;
  return t;
}

// The bytes of one element of the kernels' compute type: float64 computes in float64,
// every other dtype in float32.
constexpr size_t attention_compute_bytes(bool float64) { return float64 ? 8 : 4; }

// Whether the kernels take the problem (float64: whether its dtype is float64).
constexpr bool attention_fits(const AttentionShape& s, bool float64) {
  return s.L > 0 && s.S > 0 && s.E > 0 && s.F > 0 && s.L <= 1024 && s.S <= 1024 && s.E <= 1024 &&
         s.F <= 1024 &&
         static_cast<size_t>(attention_tiles(s).backward_elements) * attention_compute_bytes(float64) <=
             kAttentionSharedLimit;
}

}  // namespace loom::kernel
