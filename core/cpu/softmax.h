// File: core/cpu/softmax.h
// Softmax and log-softmax over one dim, forward and backward, plus the row
// helpers the fused loss kernels share. Operands may have any strides (the op
// passes views as they are); a 0-D operand is one row of length 1.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/strided.h"

namespace loom::cpu {

// y = exp(x - max) / sum(exp(x - max)) along `dim`; x and y have equal sizes.
void softmax_forward(const Strided& y, const Strided& x, int64_t dim);
// dx = y * (dy - sum(dy * y)) along `dim`, from the forward output y.
void softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim);

// y = x - max - log(sum(exp(x - max))) along `dim`.
void log_softmax_forward(const Strided& y, const Strided& x, int64_t dim);
// dx = dy - exp(y) * sum(dy) along `dim`, from the forward output y.
void log_softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim);

// --- row helpers ---------------------------------------------------------------

// `length` elements `step` apart: one softmax row, or one position's class scores.
template <class T>
struct Row {
  T* data;
  int64_t length;
  int64_t step;
  T& operator[](int64_t i) const { return data[i * step]; }
};

// The largest value; NaN if any value is NaN, so it propagates like PyTorch's.
template <class T>
T row_max(const Row<T>& row) {
  T best = row[0];
  for (int64_t i = 1; i < row.length; ++i) {
    if (std::isnan(row[i])) return row[i];
    if (row[i] > best) best = row[i];
  }
  return best;
}

// log(sum(exp(row))), shifted by the max so that no exp overflows.
template <class T>
double log_sum_exp(const Row<T>& row) {
  double shift = row_max(row);
  double total = 0.0;
  for (int64_t i = 0; i < row.length; ++i) total += std::exp(row[i] - shift);
  return shift + std::log(total);
}

}  // namespace loom::cpu
