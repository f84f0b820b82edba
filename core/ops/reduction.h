// File: core/ops/reduction.h
// Reductions: sum, mean, max, min, argmax, argmin, prod, var, std and
// logsumexp over all or some dims, sum_to, and the running sum and product
// (cumsum, cumprod).
#pragma once

#include <optional>

#include "core/tensor.h"

namespace loom {

// Bool and integer tensors sum to int64 (a mask's sum counts its true
// elements); a Bool mask's mean is a float32 fraction (integer tensors have no
// mean: TypeError, as in PyTorch). None of these carries a gradient.
Tensor sum(const Tensor& x);  // all elements -> 0-D
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor max(const Tensor& x);  // all elements -> 0-D; grad split evenly among ties
Tensor min(const Tensor& x);  // as max

struct ValuesIndices {
  Tensor values;   // differentiable; grad goes to the index below
  Tensor indices;  // int64, first occurrence
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

// The variance over `dims` (every dim when empty), as torch.var: the sum of
// squared deviations from the mean divided by count - correction (1: Bessel's
// unbiased estimate; 0: the population variance); NaN or inf where that is <= 0,
// as PyTorch. std is its square root.
Tensor var(const Tensor& x, const Shape& dims = {}, bool keepdim = false, int64_t correction = 1);
Tensor std(const Tensor& x, const Shape& dims = {}, bool keepdim = false, int64_t correction = 1);

// log(sum(exp(x))) over `dims` (every dim when empty), computed as
// m + log(sum(exp(x - m))) with m the maximum, so large values do not
// overflow; -inf where every value is -inf. Its gradient is softmax(x) over `dims`.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);

// The running sum along `dim`, as torch.cumsum: out[..., i, ...] = x[..., 0, ...]
// + ... + x[..., i, ...]. The result has `dtype` when given, else x's dtype
// when floating and int64 for integer and Bool x (a mask's cumsum counts, as
// PyTorch's); integer sums wrap around. Floating sums carry x's gradient (the
// running sum of dy from the end). On the GPU a float32 sum adds 32 elements at
// a time along the innermost dim, so its last bits may differ from the CPU's.
//   Tensor offsets = cumsum(lengths, 0);  // int64 (N): lengths' running total
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// Whether any (all) elements are nonzero, over all elements (0-D) or along
// `dim`, as torch.any / torch.all: any dtype, NaN counts as nonzero; a Bool
// result, false (true) over no elements. count_nonzero counts them (int64),
// over `dims` (every dim when empty).
//   bool diverged = any(isnan(loss)).item() != 0;
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor count_nonzero(const Tensor& x, const Shape& dims = {});

// The running product along `dim`, as torch.cumprod: out[..., i, ...] = x[..., 0,
// ...] * ... * x[..., i, ...], in `dtype` when given, else x's dtype when
// floating and int64 for integer and Bool x; integer products wrap around.
// Floating products carry x's gradient, exact where x holds zeros.
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The product of all elements (a 0-D tensor, 1 for an empty x), or along `dim`,
// as torch.prod: in `dtype` when given, else x's dtype when floating and int64
// for integer and Bool x (computed in float64, so exact while the product
// stays below 2^53 in magnitude, where PyTorch's wraps around). The gradient of
// a floating product is dy times the product of the other elements, exact
// where x holds zeros.
//   Tensor volume = prod(box_sizes, 1);  // (N, 3) -> (N)
Tensor prod(const Tensor& x, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt);

// The vector norm of x over `dims` (every dim when empty), as
// torch.linalg.vector_norm: ord 2 (sqrt of the sum of squares), 1, any p > 0
// ((sum |x|^p)^(1/p)), inf and -inf (the largest and smallest |x|) and 0 (the
// count of nonzero elements, with no gradient). Floating x; the result has
// x's dtype. The gradient is PyTorch's: 0 where the norm is 0 (and, for
// p < 1, at zero elements); at inf and -inf split evenly among the elements
// at the norm. inf and -inf refuse an empty reduction; the others give 0.
//   Tensor lengths = vector_norm(embeddings, 2.0, {-1});  // (N, D) -> (N)
Tensor vector_norm(const Tensor& x, double ord = 2.0, const Shape& dims = {}, bool keepdim = false);

// Sums `x` down to `sizes` over broadcast dims (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& sizes);

}  // namespace loom
