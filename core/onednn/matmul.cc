// File: core/onednn/matmul.cc
// The matmul plans (matmul.h), keyed by the three operands' sizes and strides;
// inputs whose batch dims interleave with their rows copied dense first.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
#include "core/onednn/matmul.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/loop.h"
#include "core/onednn/library.h"
#include "core/onednn/plan.h"

namespace loom::onednn {
namespace {

// A view oneDNN's matmul reads as it is: a matrix with a unit stride in one of
// its last two dims, batch dims of c's sizes that never repeat an element.
bool plain_matrix(const Strided& t, const Shape& batch) {
  const int64_t nd = t.dim();
  if (nd < 2 || nd > 5 || t.dtype != DType::Float32) return false;
  for (int64_t d = 0; d < nd - 2; ++d) {
    if (t.sizes[d] != batch[d] || (t.sizes[d] > 1 && t.strides[d] == 0)) return false;
  }
  return t.strides[nd - 1] == 1 || t.strides[nd - 2] == 1 || t.sizes[nd - 1] == 1 || t.sizes[nd - 2] == 1;
}

// Whether t's batch dims lie outside its matrices: each batch dim of size > 1
// strides past everything inside it. oneDNN 2.6's brgemm matmul takes such
// operands as they are; one whose batch dims interleave with its rows, as the
// heads of attention's (N, S, H, D) -> (N, H, S, D) permute do, sends the
// primitive to its gemm:jit path, which took 1.78 ms for vit_tiny's q . k^T at
// batch 64 ((64, 4, 17, 16) . (64, 4, 16, 17)); oneDNN's own reorder of such
// a view to dense (jit:uni) took about as long again.
bool batch_outer(const Strided& t) {
  const int64_t nd = t.dim();
  int64_t extent = 1;  // elements spanned by the dims inside the current one
  for (int64_t d = nd - 1; d >= 0; --d) {
    if (t.sizes[d] <= 1) continue;
    if (d < nd - 2 && t.strides[d] < extent) return false;
    extent += (t.sizes[d] - 1) * t.strides[d];
  }
  return true;
}

// Whether t's matrices have their unit stride along the rows (stored column-major).
bool column_major(const Strided& t) { return t.strides.back() != 1 && t.sizes.back() > 1; }

// t's sizes, dense at `data` with the batch dims outermost and the matrices in
// t's own orientation, so that the copy moves runs along t's unit stride.
Strided dense_batches(const Strided& t, void* data) {
  const bool transposed = column_major(t);
  Strided dense = transposed ? cpu::transpose_last(t) : t;
  dense.data = data;
  dense.strides = contiguous_strides(dense.sizes);
  return transposed ? cpu::transpose_last(dense) : dense;
}

void copy_runs(const Strided& dst, const Strided& src) {
  const bool transposed = column_major(src);
  const Strided to = transposed ? cpu::transpose_last(dst) : dst, from = transposed ? cpu::transpose_last(src) : src;
  float* out = to.ptr<float>();
  const float* in = from.ptr<float>();
  cpu::for_each_run<2>(from.sizes, {&to.strides, &from.strides}, [&](const auto& o, int64_t len) {
    std::memcpy(out + o[0], in + o[1], static_cast<size_t>(len) * sizeof(float));
  });
}

// An input as the primitive reads it: t itself, or its dense copy in `buffer`
// (the calling thread's, kept between calls) where its batch dims interleave.
struct Input {
  Strided source;
  Strided view;
  bool copied = false;
};

Input input_of(const Strided& t, std::vector<float>& buffer) {
  if (batch_outer(t)) return {t, t, false};
  buffer.resize(static_cast<size_t>(t.numel()));
  return {t, dense_batches(t, buffer.data()), true};
}

void append(Key& key, const Strided& t) {
  key.ints.insert(key.ints.end(), t.sizes.begin(), t.sizes.end());
  key.ints.insert(key.ints.end(), t.strides.begin(), t.strides.end());
}

}  // namespace

bool matmul(const Strided& c, const Strided& a_in, const Strided& b_in, bool accumulate) {
  if (!takes(c.dtype) || c.numel() == 0 || a_in.sizes.back() == 0) return false;
  const Shape batch(c.sizes.begin(), c.sizes.end() - 2);
  if (!plain_matrix(c, batch) || !plain_matrix(a_in, batch) || !plain_matrix(b_in, batch)) return false;
  thread_local std::vector<float> a_buffer, b_buffer;
  const Input a = input_of(a_in, a_buffer), b = input_of(b_in, b_buffer);
  Key key{"matmul", {accumulate}};
  append(key, c);
  append(key, a.view);
  append(key, b.view);
  std::shared_ptr<const Plan> plan = cached_plan(key, [&] {
    const dnnl_memory_desc_t mc = md_of(c), ma = md_of(a.view), mb = md_of(b.view);
    dnnl_matmul_desc_t desc;
    LOOM_DNNL_CHECK(library()->matmul_desc_init(&desc, &ma, &mb, nullptr, &mc));
    const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(dnnl_alg_kind_undef, accumulate));
    return pd ? make_plan(pd, {{DNNL_ARG_SRC, false, ma}, {DNNL_ARG_WEIGHTS, false, mb},
                               {DNNL_ARG_DST, true, mc}})
              : nullptr;
  });
  if (!plan) return false;
  for (const Input* in : {&a, &b}) {
    if (in->copied) copy_runs(in->view, in->source);
  }
  execute(*plan, {{DNNL_ARG_SRC, a.view.data}, {DNNL_ARG_WEIGHTS, b.view.data}, {DNNL_ARG_DST, c.data}});
  return true;
}

}  // namespace loom::onednn
