// File: core/cpu/softmax.cc
// Softmax and log-softmax kernels: one pass per row along the softmax dim.
#include "core/cpu/softmax.h"

#include <array>

#include "core/cpu/loop.h"

namespace loom::cpu {

namespace {

// Calls fn(rows) once per row along `dim`, where rows[k] is operand k's row of
// that index. All operands have the first one's sizes.
template <class T, size_t K, class Fn>
void for_each_row(const std::array<const Strided*, K>& operands, int64_t dim, Fn&& fn) {
  const Strided& first = *operands[0];
  if (first.numel() == 0) return;
  const bool scalar = first.dim() == 0;
  Shape outer = first.sizes;
  if (!scalar) outer[dim] = 1;
  std::array<const Shape*, K> strides;
  for (size_t k = 0; k < K; ++k) strides[k] = &operands[k]->strides;
  for_each_offset<K>(outer, strides, [&](const std::array<int64_t, K>& offsets) {
    std::array<Row<T>, K> rows;
    for (size_t k = 0; k < K; ++k) {
      rows[k] = {operands[k]->template ptr<T>() + offsets[k], scalar ? 1 : first.sizes[dim],
                 scalar ? 0 : operands[k]->strides[dim]};
    }
    fn(rows);
  });
}

}  // namespace

void softmax_forward(const Strided& y, const Strided& x, int64_t dim) {
  visit_float(x.dtype, [&]<class T>() {
    for_each_row<T, 2>({&y, &x}, dim, [](const std::array<Row<T>, 2>& rows) {
      const auto& [out, in] = rows;
      const T max = row_max(in);
      double total = 0.0;
      for (int64_t i = 0; i < in.length; ++i) {
        out[i] = std::exp(in[i] - max);
        total += out[i];
      }
      for (int64_t i = 0; i < in.length; ++i) out[i] = static_cast<T>(out[i] / total);
    });
  });
}

void softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim) {
  visit_float(y.dtype, [&]<class T>() {
    for_each_row<T, 3>({&dx, &dy, &y}, dim, [](const std::array<Row<T>, 3>& rows) {
      const auto& [din, dout, out] = rows;
      double dot = 0.0;  // sum(dy * y)
      for (int64_t i = 0; i < out.length; ++i) dot += static_cast<double>(dout[i]) * out[i];
      for (int64_t i = 0; i < out.length; ++i) din[i] = static_cast<T>(out[i] * (dout[i] - dot));
    });
  });
}

void log_softmax_forward(const Strided& y, const Strided& x, int64_t dim) {
  visit_float(x.dtype, [&]<class T>() {
    for_each_row<T, 2>({&y, &x}, dim, [](const std::array<Row<T>, 2>& rows) {
      const auto& [out, in] = rows;
      const double lse = log_sum_exp(in);
      for (int64_t i = 0; i < in.length; ++i) out[i] = static_cast<T>(in[i] - lse);
    });
  });
}

void log_softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim) {
  visit_float(y.dtype, [&]<class T>() {
    for_each_row<T, 3>({&dx, &dy, &y}, dim, [](const std::array<Row<T>, 3>& rows) {
      const auto& [din, dout, out] = rows;
      double total = 0.0;  // sum(dy)
      for (int64_t i = 0; i < out.length; ++i) total += dout[i];
      for (int64_t i = 0; i < out.length; ++i) {
        din[i] = static_cast<T>(dout[i] - std::exp(out[i]) * total);
      }
    });
  });
}

}  // namespace loom::cpu
