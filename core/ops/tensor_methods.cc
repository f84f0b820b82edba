// File: core/ops/tensor_methods.cc
// Tensor's reduction methods and repeat (core/tensor.h) forward to the
// functional ops: the methods are declared with Tensor but need the ops, so
// they live here.
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/tensor.h"

namespace loom {

Tensor Tensor::sum() const { return loom::sum(*this); }
Tensor Tensor::mean() const { return loom::mean(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return loom::argmax(*this, dim, keepdim); }
Tensor Tensor::repeat(const Shape& repeats) const { return loom::repeat(*this, repeats); }

}  // namespace loom
