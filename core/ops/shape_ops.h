// File: core/ops/shape_ops.h
// Ops that rearrange whole tensors rather than compute on elements.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom {

// Concatenates along `dim` (may be negative), as torch.cat: every tensor has the
// same number of dims and device, and the same sizes except in `dim`. Dtypes
// may differ: the result has the dtype they promote to (promote_types in
// core/dtype.h: float32 with bfloat16 -> float32, int64 with float32 ->
// float32, Bool with anything -> the other), and the conversion is
// differentiable, so each input's gradient is its slice of the output's, in its
// own dtype. As torch.cat, a 1-D tensor without elements is skipped whatever
// the others' shapes (it still counts for the dtype), so an accumulator may
// begin as empty({0}) and grow in a loop.
//   cat({a, b}, 1);  // a (N, 3), b (N, 5) -> (N, 8)
//   all = cat({all, batch_predictions});  // all = empty({0}, ...) before the loop
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);

// torch.cat's legacy rule: whether cat skips `t` (1-D without elements), taking
// no part in the shape checks and adding nothing to the result.
bool cat_skips(const Tensor& t);

// Joins tensors of one shape along a new dim `dim` (in [-(ndim+1), ndim]), as
// torch.stack, with cat's dtype promotion and gradient.
//   stack({a, b}, 0);  // a, b (3, 4) -> (2, 3, 4)
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// Views of consecutive slices along `dim`, as torch.split and torch.chunk (no
// copies; each view's gradient flows back to x). split cuts pieces of
// `split_size` (the last may be shorter) or of the listed sizes, which must add
// up to x.size(dim); chunk cuts `chunks` pieces of ceil(size / chunks) each, so
// it may return fewer (torch.chunk does the same).
//   auto halves = chunk(x, 2, 1);          // x (N, 2C) -> two (N, C) views
//   auto parts = split(x, {1, 3}, 0);      // x (4, D) -> (1, D) and (3, D)
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// x with the order of its elements reversed along each of `dims`, as torch.flip
// (a copy, differentiable).
//   Tensor mirrored = flip(images, {3});  // (N, C, H, W) flipped left to right
Tensor flip(const Tensor& x, const Shape& dims);

// The lower (tril) or upper (triu) triangle of the matrices in x's last two
// dims, the rest zeroed, as torch.tril / torch.triu: x has 2 or more dims (any
// before the last two are a batch) and any dtype, Bool included. tril keeps
// the elements with column - row <= diagonal, triu those with column - row >=
// diagonal: diagonal 0 is the main diagonal, > 0 above it, < 0 below. The
// gradient is dy with the same triangle zeroed.
//   Tensor causal = tril(ones({T, T}));  // 1 where a query may attend to a key
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// x with dim `dim` split into dims of `sizes`, as torch.unflatten: their product
// is x.size(dim), and one of them may be -1, inferred. The inverse of flatten,
// and a view of x whatever its strides (splitting one dim needs no copy); its
// gradient flows back to x.
//   Tensor heads = unflatten(q, 2, {H, -1});  // q (N, T, H * D) -> (N, T, H, D)
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);

// x tiled repeats[i] times along dim i, as torch.Tensor.repeat (also a method,
// x.repeat): repeats has at least x.dim() entries, each >= 0, and its extra
// leading ones make new leading dims; a 0 gives an empty dim. A copy, any
// dtype; the gradient sums dy over the copies.
//   Tensor tiled = repeat(x, {2, 1, 3});  // x (4, 5) -> (2, 4, 15)
Tensor repeat(const Tensor& x, const Shape& repeats);

// Sub-pixel rearrangement, as torch.nn.functional.pixel_shuffle: x (*, C r^2, H, W)
// -> (*, C, H r, W r), where channel c r^2 + i r + j at (h, w) moves to channel c
// at (h r + i, w r + j); pixel_unshuffle is its inverse, (*, C, H r, W r) ->
// (*, C r^2, H, W). The factor r is >= 1. A copy in x's memory format (a
// channels-last x gives a channels-last result); the gradient is the inverse move.
//   Tensor hr = pixel_shuffle(conv(x), 3);  // ESPCN: (N, 9, H, W) -> (N, 1, 3H, 3W)
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

}  // namespace loom
