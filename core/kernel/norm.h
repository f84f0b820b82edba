// File: core/kernel/norm.h
// The running statistics a training batch norm blends, shared by the CPU and
// CUDA batch-norm kernels, and the operand checks of the layer-norm row kernels
// (core/cpu/layer_norm.h, core/cuda/layer_norm.h), host-side.
#pragma once

#include <optional>

#include "core/error.h"
#include "core/strided.h"

namespace loom::kernel {

// Running statistics (C) that a training forward blends in place, as PyTorch:
//   running = (1 - momentum) * running + momentum * batch statistic,
// with the unbiased batch variance (biased * M / (M - 1)).
struct RunningStats {
  Strided mean;
  Strided var;
  double momentum = 0.1;
};

// The dtype a norm keeps its statistics in (batch norm's weights and running
// statistics too) for inputs of `dtype`: float32 for the 16-bit dtypes, else
// the input's own.
inline DType statistics_dtype(DType dtype) {
  return dtype == DType::BFloat16 || dtype == DType::Float16 ? DType::Float32 : dtype;
}

// The operands of a layer norm over N rows of D values, checked against x (N, D)
// so that a row kernel never reads past one: every message names `op` and the
// operand. Row operands are dense row-major (N, D) in x's dtype, statistics
// dense (N) in statistics_dtype, weights and their gradients dense (D) in
// x's dtype or absent.
class LayerNormOperands {
 public:
  LayerNormOperands(const char* op, const Strided& x) : op_(op), dtype_(x.dtype) {
    LOOM_CHECK(x.dim() == 2, ShapeError, "[{}] x must be (N, D) rows, got sizes {}", op, shape_str(x.sizes));
    LOOM_CHECK(is_floating(x.dtype), TypeError, "[{}] x must be a floating dtype, got {}", op, dtype_name(x.dtype));
    n_ = x.sizes[0];
    d_ = x.sizes[1];
    rows(x, "x");
  }

  int64_t n() const { return n_; }
  int64_t d() const { return d_; }

  void rows(const Strided& t, const char* name) const {
    LOOM_CHECK(t.dim() == 2 && t.sizes[0] == n_ && t.sizes[1] == d_ && (t.strides[1] == 1 || d_ <= 1) &&
                   (t.strides[0] == d_ || n_ <= 1),
               ShapeError, "[{}] {} must be dense ({}, {}) rows, got sizes {} strides {}", op_, name, n_, d_,
               shape_str(t.sizes), shape_str(t.strides));
    LOOM_CHECK(t.dtype == dtype_, TypeError, "[{}] {} is {} but x is {}; pass one dtype", op_, name,
               dtype_name(t.dtype), dtype_name(dtype_));
  }

  void statistic(const Strided& t, const char* name) const { vector(t, n_, statistics_dtype(dtype_), name); }

  void row_vector(const std::optional<Strided>& t, const char* name) const {
    if (t) vector(*t, d_, dtype_, name);
  }

 private:
  void vector(const Strided& t, int64_t size, DType dtype, const char* name) const {
    LOOM_CHECK(t.dim() == 1 && t.sizes[0] == size && (t.strides[0] == 1 || size <= 1), ShapeError,
               "[{}] {} must be a dense vector of {}, got sizes {} strides {}", op_, name, size, shape_str(t.sizes),
               shape_str(t.strides));
    LOOM_CHECK(t.dtype == dtype, TypeError, "[{}] {} must be {} (layer_norm.h says which dtype goes where), got {}",
               op_, name, dtype_name(dtype), dtype_name(t.dtype));
  }

  const char* op_;
  DType dtype_;
  int64_t n_ = 0, d_ = 0;
};

// The checks the forward and the backward share: x, its statistics and weight.
inline LayerNormOperands check_layer_norm_inputs(const char* op, const Strided& x, const Strided& mean,
                                                 const Strided& invstd, const std::optional<Strided>& weight) {
  LayerNormOperands operands(op, x);
  operands.statistic(mean, "mean");
  operands.statistic(invstd, "invstd");
  operands.row_vector(weight, "weight");
  return operands;
}

// Every operand of a layer-norm forward; returns them checked, for N and D.
inline LayerNormOperands check_layer_norm_forward(const char* op, const Strided& y, const Strided& mean,
                                                  const Strided& invstd, const Strided& x,
                                                  const std::optional<Strided>& weight,
                                                  const std::optional<Strided>& bias) {
  LayerNormOperands operands = check_layer_norm_inputs(op, x, mean, invstd, weight);
  operands.rows(y, "y");
  operands.row_vector(bias, "bias");
  return operands;
}

// Every operand of a layer-norm backward; returns them checked, for N and D.
inline LayerNormOperands check_layer_norm_backward(const char* op, const Strided& dx,
                                                   const std::optional<Strided>& dweight,
                                                   const std::optional<Strided>& dbias, const Strided& dy,
                                                   const Strided& x, const Strided& mean, const Strided& invstd,
                                                   const std::optional<Strided>& weight) {
  LayerNormOperands operands = check_layer_norm_inputs(op, x, mean, invstd, weight);
  operands.rows(dy, "dy");
  operands.rows(dx, "dx");
  operands.row_vector(dweight, "dweight");
  operands.row_vector(dbias, "dbias");
  return operands;
}

}  // namespace loom::kernel
