// File: core/ops/linalg.cc
// matmul and linear: validation, the batched GEMM calls, and their backward.
//
// M, N, K: (M, K) . (K, N) -> (M, N); "batch" is the broadcast leading dims.
// in, out: linear's feature counts; rows: the product of x's leading dims.
#include "core/ops/linalg.h"
#include "core/ops/linalg_internal.h"

#include <fmt/format.h>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/cpu/copy.h"
#include "core/cpu/gemm.h"
#include "core/cuda/bias.h"
#include "core/error.h"
#include "core/onednn/matmul.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/trace.h"

namespace loom {
namespace {

// c = a b with the CPU or cuBLAS GEMM, by the device of `on`.
void matmul_on(const Tensor& on, const Strided& c, const Strided& a, const Strided& b,
               bool accumulate = false) {
  if (on_onednn_tier(on) && onednn::matmul(c, a, b, accumulate)) return;
  LOOM_KERNEL(on, matmul, c, a, b, accumulate);
}

// `t` itself when `view(t)` can go to BLAS as it is, else a contiguous copy.
// Detached either way: the tensor only feeds a kernel, so it needs no graph
// node, and it still shares storage with `t` when no copy was made.
template <class ViewFn>
Tensor blas_operand(const Tensor& t, ViewFn view) {
  Tensor detached = t.detach();
  return cpu::is_blas_matrix(view(detached.strided())) ? detached : detached.contiguous();
}

// `s` broadcast to `sizes` (right-aligned): new dims and size-1 dims repeat
// with stride 0.
Strided broadcast_to(Strided s, const Shape& sizes) {
  Shape strides(sizes.size(), 0);
  size_t offset = sizes.size() - s.sizes.size();
  for (size_t i = 0; i < s.sizes.size(); ++i) {
    if (s.sizes[i] == sizes[i + offset]) strides[i + offset] = s.strides[i];
  }
  s.sizes = sizes;
  s.strides = std::move(strides);
  return s;
}

// matmul's operands as batches of matrices.
struct MatmulShape {
  Shape batch;  // broadcast batch dims
  int64_t m = 1, k = 1, n = 1;
  bool a_vector = false, b_vector = false;  // 1-D operands, promoted to (1, K) and (K, 1)
  Shape out;                                // the result, promoted dims dropped

  Shape full(int64_t rows, int64_t cols) const {
    Shape sizes = batch;
    sizes.push_back(rows);
    sizes.push_back(cols);
    return sizes;
  }
};

// A 1-D operand as a matrix: a row (1, K) on the left, a column (K, 1) on the right.
Strided as_matrix(Strided s, bool left) {
  if (s.dim() != 1) return s;
  if (left) {
    s.sizes.insert(s.sizes.begin(), 1);
    s.strides.insert(s.strides.begin(), 0);  // a size-1 dim never steps
  } else {
    s.sizes.push_back(1);
    s.strides.push_back(1);
  }
  return s;
}

Strided left_view(const Strided& a, const MatmulShape& ms) {
  return broadcast_to(as_matrix(a, true), ms.full(ms.m, ms.k));
}
Strided right_view(const Strided& b, const MatmulShape& ms) {
  return broadcast_to(as_matrix(b, false), ms.full(ms.k, ms.n));
}

// The result (or its gradient), shaped `out`, seen as (batch, M, N): the dims
// that 1-D operands dropped come back with size 1.
Strided result_view(Strided s, const MatmulShape& ms) {
  if (ms.a_vector) {
    auto at = s.sizes.size() - (ms.b_vector ? 0 : 1);
    s.sizes.insert(s.sizes.begin() + at, 1);
    s.strides.insert(s.strides.begin() + at, 0);
  }
  if (ms.b_vector) {
    s.sizes.push_back(1);
    s.strides.push_back(1);
  }
  return s;
}

Shape batch_dims(const Tensor& t) {
  return t.dim() <= 2 ? Shape{} : Shape(t.sizes().begin(), t.sizes().end() - 2);
}

Shape broadcast_batch(const Tensor& a, const Tensor& b) {
  try {
    return broadcast_shapes(batch_dims(a), batch_dims(b), "matmul");
  } catch (const ShapeError& e) {
    throw ShapeError(fmt::format("{} (batch dims of shapes {} and {}; the last two are matrices)",
                                 e.what(), shape_str(a.sizes()), shape_str(b.sizes())));
  }
}

MatmulShape matmul_shape(const Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
             "[matmul] both arguments need at least 1 dim, got shapes {} and {}; scale by a 0-D "
             "tensor with mul()",
             shape_str(a.sizes()), shape_str(b.sizes()));
  MatmulShape ms;
  ms.a_vector = a.dim() == 1;
  ms.b_vector = b.dim() == 1;
  ms.k = a.size(-1);
  int64_t b_rows = ms.b_vector ? b.size(0) : b.size(-2);
  LOOM_CHECK(ms.k == b_rows, ShapeError,
             "[matmul] shapes {} and {} cannot be multiplied: the first has {} columns (last dim) "
             "but the second has {} rows ({})",
             shape_str(a.sizes()), shape_str(b.sizes()), ms.k, b_rows,
             ms.b_vector ? "its only dim" : "second-to-last dim");
  ms.m = ms.a_vector ? 1 : a.size(-2);
  ms.n = ms.b_vector ? 1 : b.size(-1);
  ms.batch = broadcast_batch(a, b);
  ms.out = ms.batch;
  if (!ms.a_vector) ms.out.push_back(ms.m);
  if (!ms.b_vector) ms.out.push_back(ms.n);
  return ms;
}

void check_operands(const Tensor& a, const Tensor& b, std::string_view op, std::string_view a_name,
                    std::string_view b_name) {
  check_float_tensor(a, op, a_name);
  check_float_tensor(b, op, b_name);
  check_same_dtype_device(a, b, op);
}

}  // namespace

// ---- matmul -----------------------------------------------------------------
// y (batch, M, N) = a (batch, M, K) . b (batch, K, N)
// da = dy . b^T and db = a^T . dy, each summed over the batch dims its operand
// was broadcast along (the kernel accumulates into stride-0 views of da, db).

// Under autocast, CUDA operands are cast to the autocast dtype first (as linear).
Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  trace::OpScope trace("matmul");
  const Tensor a = autocast_operand(a_in), b = autocast_operand(b_in);
  check_operands(a, b, "matmul", "first argument", "second argument");
  MatmulShape ms = matmul_shape(a, b);
  Tensor ak = blas_operand(a, [&](const Strided& s) { return left_view(s, ms); });
  Tensor bk = blas_operand(b, [&](const Strided& s) { return right_view(s, ms); });
  Tensor y = empty(ms.out, a.options());
  matmul_on(y, result_view(y.strided(), ms), left_view(ak.strided(), ms),
              right_view(bk.strided(), ms));

  if (needs_grad({a, b})) {
    bool need_a = a.requires_grad(), need_b = b.requires_grad();
    Tensor saved_a = need_b ? ak : Tensor(), saved_b = need_a ? bk : Tensor();
    Shape a_sizes = a.sizes(), b_sizes = b.sizes();
    record("matmul", {a, b}, y,
           [=](const Tensor& dy) -> std::vector<Tensor> {
             Tensor g = blas_operand(dy, [&](const Strided& s) { return result_view(s, ms); });
             Strided dyv = result_view(g.strided(), ms);
             Tensor da, db;
             if (need_a) {
               da = zeros(a_sizes, dy.options());
               matmul_on(da, left_view(da.strided(), ms), dyv,
                           cpu::transpose_last(right_view(saved_b.strided(), ms)),
                           /*accumulate=*/true);
             }
             if (need_b) {
               db = zeros(b_sizes, dy.options());
               matmul_on(db, right_view(db.strided(), ms),
                           cpu::transpose_last(left_view(saved_a.strided(), ms)), dyv,
                           /*accumulate=*/true);
             }
             return {da, db};
           },
           {saved_a, saved_b});
  }
  if (trace.recording()) trace.record({a_in, b_in}, y);
  return y;
}

// ---- linear -----------------------------------------------------------------
// y (rows, out) = x (rows, in) . weight^T (in, out) + bias (out)
// dx = dy . weight, dweight = dy^T . x, dbias = sum of dy over rows.

namespace linalg_detail {

void check_linear_args(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_operands(x, weight, "linear", "input", "weight");
  LOOM_CHECK(weight.dim() == 2, ShapeError,
             "[linear] weight must be 2-D (out_features, in_features), got shape {}",
             shape_str(weight.sizes()));
  LOOM_CHECK(x.dim() >= 1, ShapeError,
             "[linear] input must have at least 1 dim (*, in_features), got shape {}",
             shape_str(x.sizes()));
  LOOM_CHECK(x.size(-1) == weight.size(1), ShapeError,
             "[linear] input of shape {} has {} features in its last dim but weight {} expects {} "
             "(weight is (out_features, in_features))",
             shape_str(x.sizes()), x.size(-1), shape_str(weight.sizes()), weight.size(1));
  if (!bias.defined()) return;
  check_float_tensor(bias, "linear", "bias");
  check_same_dtype_device(x, bias, "linear");
  LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), ShapeError,
             "[linear] bias must have shape ({},) to match weight {}, got {}", weight.size(0),
             shape_str(weight.sizes()), shape_str(bias.sizes()));
}

}  // namespace linalg_detail

namespace {

using linalg_detail::check_linear_args;

// A contiguous tensor seen as a (rows, cols) matrix.
Strided as_rows(const Tensor& t, int64_t cols) {
  int64_t rows =
      cols == 0 ? numel_of(Shape(t.sizes().begin(), t.sizes().end() - 1)) : t.numel() / cols;
  return {t.raw_data(), t.dtype(), {rows, cols}, {cols, 1}};
}

// y2 (rows, out) = x2 (rows, in) . wt (in, out) + bias (out), y2 viewing y. On
// the GPU the per-channel kernel adds the bias after the GEMM: the broadcast
// copy that would let the GEMM accumulate onto it moves the same bytes but
// divides per element. On the CPU y starts as the bias and the GEMM adds to it.
void linear_forward(const Tensor& y, const Strided& y2, const Strided& x2, const Strided& wt,
                    const Tensor& bias) {
  DeviceGuard guard(y.device());
  if (y.device().is_cuda() && bias.defined()) {
    matmul_on(y, y2, x2, wt);
    cuda::add_channel_bias(y2, bias.strided());
    return;
  }
  if (bias.defined()) LOOM_KERNEL(y, copy, y2, broadcast_to(bias.strided(), y2.sizes));
  matmul_on(y, y2, x2, wt, bias.defined());
}

// dbias (out) = the sum of dy2 (rows, out) over rows, dy2 viewing the contiguous g:
// on the GPU with the deterministic per-channel sum.
Tensor linear_bias_grad(const Tensor& g, const Strided& dy2) {
  DeviceGuard guard(g.device());
  if (g.device().is_cuda()) {
    DeviceGuard guard(g.device());
    Tensor db = empty({dy2.sizes[1]}, g.options());
    cuda::channel_sum(db.strided(), dy2);
    return db;
  }
  return sum(g.reshape(dy2.sizes), {0});
}

}  // namespace

// Under autocast, CUDA operands are cast to the autocast dtype first; the casts'
// backward returns fp32 gradients to fp32 parameters.
Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  trace::OpScope trace("linear");
  if (trace.substituting()) {  // fusion by tracing: this linear may head a fused chain
    if (auto y = trace.substitute({x_in, weight_in, bias_in}, {})) return *y;
  }
  const Tensor x = autocast_operand(x_in), weight = autocast_operand(weight_in),
               bias = autocast_operand(bias_in);
  check_linear_args(x, weight, bias);
  int64_t in = weight.size(1), out = weight.size(0);
  Tensor xk = x.detach().contiguous();
  Tensor wk = blas_operand(weight, [](const Strided& s) { return s; });
  Shape y_sizes = x.sizes();
  y_sizes.back() = out;
  Tensor y = empty(y_sizes, x.options());
  Strided y2 = as_rows(y, out);
  linear_forward(y, y2, as_rows(xk, in), cpu::transpose_last(wk.strided()), bias);

  if (needs_grad({x, weight, bias})) {
    bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    bool need_b = bias.defined() && bias.requires_grad();
    Tensor saved_x = need_w ? xk : Tensor(), saved_w = need_x ? wk : Tensor();
    Shape x_sizes = x.sizes();
    record("linear", {x, weight, bias}, y,
           [=](const Tensor& dy) -> std::vector<Tensor> {
             Tensor g = dy.contiguous();
             Strided dy2 = as_rows(g, out);
             Tensor dx, dw, db;
             if (need_x) {
               dx = empty(x_sizes, dy.options());
               matmul_on(dx, as_rows(dx, in), dy2, saved_w.strided());
             }
             if (need_w) {
               dw = empty({out, in}, dy.options());
               matmul_on(dw, dw.strided(), cpu::transpose_last(dy2), as_rows(saved_x, in));
             }
             if (need_b) db = linear_bias_grad(g, dy2);
             return {dx, dw, db};
           },
           {saved_x, saved_w});
  }
  if (trace.recording()) trace.record({x_in, weight_in, bias_in}, y);
  return y;
}

}  // namespace loom
