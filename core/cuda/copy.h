// File: core/cuda/copy.h
// Strided copies and fills on the GPU (the kernels in copy.cu, checked; the
// rest of the memory API is in runtime.h). No CUDA types, so core/ops
// includes it in every build.
#pragma once

#include "core/strided.h"

namespace loom::cuda {

// dst[i] = convert(src[i]) for every index; same sizes, any strides and dtypes.
void copy(const Strided& dst, const Strided& src);
// dst[i] = value, converted to dst's dtype.
void fill(const Strided& dst, double value);
// dst[i] = start + i * step, converted to dst's dtype; dst is dense and 1-D.
// arange's values are made here rather than copied from the host, so that a
// CUDA graph that captures an op using arange (flip, one_hot) replays it.
void arange(const Strided& dst, double start, double step);

}  // namespace loom::cuda
