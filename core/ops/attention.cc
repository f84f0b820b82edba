// File: core/ops/attention.cc
// scaled_dot_product_attention: the arguments checked, the fused GPU kernels
// (core/cuda/attention.h) with their backward beside them, and matmul, softmax,
// matmul for what they do not take.
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
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/softmax.h"
#include "core/trace.h"

namespace loom {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_float_tensor(q, kOp, "q");
  check_float_tensor(k, kOp, "k");
  check_float_tensor(v, kOp, "v");
  LOOM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), TypeError,
             "[{}] q, k and v must share a dtype, got {}, {} and {}", kOp, dtype_name(q.dtype()),
             dtype_name(k.dtype()), dtype_name(v.dtype()));
  LOOM_CHECK(q.device() == k.device() && q.device() == v.device(), DeviceError,
             "[{}] q, k and v must be on one device, got {}, {} and {}", kOp, q.device().str(), k.device().str(),
             v.device().str());
  LOOM_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError,
             "[{}] q, k and v must have the same number of dims, at least 2 ((..., L, E), (..., S, E), "
             "(..., S, F)), got shapes {}, {} and {}",
             kOp, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  const Shape batch(q.sizes().begin(), q.sizes().end() - 2);
  const bool same_batch = Shape(k.sizes().begin(), k.sizes().end() - 2) == batch &&
                          Shape(v.sizes().begin(), v.sizes().end() - 2) == batch;
  LOOM_CHECK(same_batch && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), ShapeError,
             "[{}] expects q (..., L, E), k (..., S, E) and v (..., S, F) with the same leading dims, got "
             "shapes {}, {} and {}; expand() a shared k or v to q's leading dims first",
             kOp, shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
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

Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  DeviceGuard guard(q.device());
  const Tensor q4 = kernel_view(q).detach(), k4 = kernel_view(k).detach(), v4 = kernel_view(v).detach();
  const int64_t b1 = q4.size(0), b2 = q4.size(1);
  const Tensor y4 = rows_outer(b1, b2, q4.size(2), v4.size(3), q4);
  cuda::attention_forward(y4.strided(), q4.strided(), k4.strided(), v4.strided(), scale);
  const bool three_d = q.dim() == 3;
  Tensor y = three_d ? y4.squeeze(0) : y4;
  if (needs_grad({q, k, v})) {
    record(kOp, {q, k, v}, y, [q4, k4, v4, scale, three_d](const Tensor& dy) -> std::vector<Tensor> {
      DeviceGuard guard(q4.device());
      const Tensor dy4 = kernel_view(dy);
      const int64_t b1 = q4.size(0), b2 = q4.size(1);
      Tensor dq = rows_outer(b1, b2, q4.size(2), q4.size(3), q4);
      Tensor dk = rows_outer(b1, b2, k4.size(2), k4.size(3), k4);
      Tensor dv = rows_outer(b1, b2, v4.size(2), v4.size(3), v4);
      cuda::attention_backward(dq.strided(), dk.strided(), dv.strided(), dy4.strided(), q4.strided(),
                               k4.strided(), v4.strided(), scale);
      if (three_d) return {dq.squeeze(0), dk.squeeze(0), dv.squeeze(0)};
      return {dq, dk, dv};
    }, {q4, k4, v4});
  }
  return y;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    std::optional<double> scale) {
  trace::OpScope trace(kOp);
  LOOM_CHECK(q_in.defined() && k_in.defined() && v_in.defined(), ValueError, "[{}] q, k and v must be defined",
             kOp);
  const Tensor q = autocast_operand(q_in), k = autocast_operand(k_in), v = autocast_operand(v_in);
  check_operands(q, k, v);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  LOOM_CHECK(std::isfinite(s), ValueError, "[{}] scale must be finite, got {}", kOp, s);
  const Tensor y = runs_fused(q, k, v) ? fused(q, k, v, s)
                                       : matmul(softmax(mul(matmul(q, k.transpose(-2, -1)), s), -1), v);
  if (trace.recording()) trace.record({q_in, k_in, v_in}, y, {{"scale", s}});
  return y;
}

}  // namespace loom
