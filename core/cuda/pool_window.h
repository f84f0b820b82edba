// File: core/cuda/pool_window.h
// Max pooling whose saved index is the position inside the window, one byte per
// output: (h - h_origin) * kernel_w + (w - w_origin), where (h_origin, w_origin)
// is the window's top-left corner in padded coordinates (p * stride - pad). The
// backward reads that byte instead of an int64 (an eighth of the traffic) and,
// where windows do not overlap (stride >= kernel), writes every dx element
// exactly once with no memset and no atomics (a thread per output writing its
// whole window where the windows tile the input exactly); where they overlap, each dx
// element gathers over the windows that contain it, in row-major window order
// (the CPU's order), so results are deterministic.
//
// N batch, C channels, H, W input plane, P, Q output plane. Operands are 4-D
// float32, float64, bfloat16 or float16 (16-bit ones compute in float32) with
// any strides; where x (dx) and the index are channels-last with channels a
// multiple of the 16-byte vector and 16-byte aligned pointers, each thread
// handles 16 bytes of channels, and y (dy) moves as whole vectors when it is
// laid out alike, else element by element (an NCHW y under a channels-last x,
// for a flatten that then needs no copy). Values and tie rules are those of max_pool2d_forward in
// pool.h: the first max wins, a NaN wins over numbers.
#pragma once

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::cuda {

// True when every window position fits the one-byte index (kernel_h * kernel_w <= 256).
bool max_pool2d_window_supported(const kernel::Pool2dParams& params);

// y and index (N, C, P, Q; index uint8) from x (N, C, H, W).
void max_pool2d_window_forward(const Strided& y, const Strided& index, const Strided& x,
                               const kernel::Pool2dParams& params);
// dx (N, C, H, W) is overwritten from dy and the forward's index. With dy_addend (dy's sizes and
// dtype, any layout) it is the backward of dy + dy_addend, summed as the kernel reads them: autograd's
// sum of two gradients of the output (core/autograd.h, BackwardSumFn), each element's sum rounded
// to the dtype first, so dx has the bits of the backward of the separate sum.
void max_pool2d_window_backward(const Strided& dx, const Strided& dy, const Strided& index,
                                const kernel::Pool2dParams& params, const Strided* dy_addend = nullptr);

}  // namespace loom::cuda
