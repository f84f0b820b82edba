// File: core/onednn/matmul.cc
// The matmul plans (matmul.h), keyed by the three operands' sizes and strides.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
#include "core/onednn/matmul.h"

#include <oneapi/dnnl/dnnl.h>

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
// batch 64 ((64, 4, 17, 16) . (64, 4, 16, 17)), where a reorder to dense and
// brgemm take about a fifth of that.
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

dnnl_format_tag_t row_major_tag(int64_t nd) {
  switch (nd) {
    case 2: return dnnl_ab;
    case 3: return dnnl_abc;
    case 4: return dnnl_abcd;
    default: return dnnl_abcde;  // plain_matrix allows at most 5 dims
  }
}

// The layout the primitive reads an input in: t's own, or row-major where its
// batch dims are not outside its matrices (the plan reorders it there).
dnnl_memory_desc_t inner_input(const Strided& t) {
  return batch_outer(t) ? md_of(t) : md_tag(t.sizes, row_major_tag(t.dim()));
}

void append(Key& key, const Strided& t) {
  key.ints.insert(key.ints.end(), t.sizes.begin(), t.sizes.end());
  key.ints.insert(key.ints.end(), t.strides.begin(), t.strides.end());
}

}  // namespace

bool matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate) {
  if (!takes(c.dtype) || c.numel() == 0 || a.sizes.back() == 0) return false;
  const Shape batch(c.sizes.begin(), c.sizes.end() - 2);
  if (!plain_matrix(c, batch) || !plain_matrix(a, batch) || !plain_matrix(b, batch)) return false;
  Key key{"matmul", {accumulate}};
  append(key, c);
  append(key, a);
  append(key, b);
  std::shared_ptr<const Plan> plan = cached_plan(key, [&] {
    const dnnl_memory_desc_t mc = md_of(c), ma = md_of(a), mb = md_of(b);
    const dnnl_memory_desc_t inner_a = inner_input(a), inner_b = inner_input(b);
    dnnl_matmul_desc_t desc;
    LOOM_DNNL_CHECK(library()->matmul_desc_init(&desc, &inner_a, &inner_b, nullptr, &mc));
    const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(dnnl_alg_kind_undef, accumulate));
    return pd ? make_plan(pd, {{DNNL_ARG_SRC, false, ma}, {DNNL_ARG_WEIGHTS, false, mb},
                               {DNNL_ARG_DST, true, mc}})
              : nullptr;
  });
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_SRC, a.data}, {DNNL_ARG_WEIGHTS, b.data}, {DNNL_ARG_DST, c.data}});
  return true;
}

}  // namespace loom::onednn
