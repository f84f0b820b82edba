// File: core/kernel/pad.h
// The pad modes and spec, what one element of a pad reads, and which output elements one input
// element's gradient gathers, written once for core/cpu/pad.cc and
// core/cuda/pad.cu (nvcc sees __host__ __device__). Index conventions are
// PyTorch's: with i = o - before the output index o reads input index i when
// 0 <= i < in, else i mirrored about the edge element (reflect: -i, or
// 2 (in - 1) - i) or clamped to it (replicate); constant padding reads nothing.
//
// in, out: a dim's extent in the input and the output (out = in + before + after).
#pragma once

#include <cstdint>

#include "core/kernel/divider.h"
#include "core/kernel/host_device.h"
#include "core/shape.h"
#include "core/strided.h"

namespace loom::kernel {

enum class PadMode : uint8_t { Constant, Reflect, Replicate };

struct PadSpec {
  PadMode mode = PadMode::Constant;
  Shape before;        // per dim of the tensors (0 for a dim not padded)
  double value = 0.0;  // Constant only, converted to the tensors' dtype
};

}  // namespace loom::kernel

namespace loom::kernel::math {

constexpr int kPadMaxDims = 8;

// The geometry of one pad as plain arrays, for kernels (dims as the tensors').
struct PadDims {
  int ndim = 0;
  PadMode mode = PadMode::Constant;
  int64_t in_sizes[kPadMaxDims] = {}, out_sizes[kPadMaxDims] = {};
  int64_t in_strides[kPadMaxDims] = {}, out_strides[kPadMaxDims] = {};
  int64_t before[kPadMaxDims] = {};
  // Both tensors have fewer than 2^31 elements: indices split in 32 bits.
  bool narrow = false;
  Divider in_dividers[kPadMaxDims], out_dividers[kPadMaxDims];
};

// The dividers of g's extents, after they are set or changed (narrow: both
// tensors' elements are numbered in 31 bits).
inline void set_pad_dividers(PadDims& g) {
  for (int k = 0; g.narrow && k < g.ndim; ++k) {
    g.in_dividers[k] = divider_for(g.in_sizes[k]);
    g.out_dividers[k] = divider_for(g.out_sizes[k]);
  }
}

// `in` and `out` are the input and the padded tensor (or dx and dy); the host
// wrappers check the rank. Dims are taken in the memory order of the tensor
// the kernel writes (out, or in when `writes_input`: a gradient), largest
// stride first, so consecutive indices touch neighbouring elements in NCHW and
// channels-last alike; a pad treats its dims independently, so any order
// gives the same elements.
inline PadDims pad_dims(const Strided& out, const Strided& in, const PadSpec& spec,
                        bool writes_input = false) {
  PadDims g;
  g.ndim = static_cast<int>(out.dim());
  g.mode = spec.mode;
  const Shape& lead = writes_input ? in.strides : out.strides;
  int order[kPadMaxDims];
  for (int d = 0; d < g.ndim; ++d) {
    int k = d;  // insertion sort by descending stride, ties in dim order
    while (k > 0 && lead[order[k - 1]] < lead[d]) {
      order[k] = order[k - 1];
      --k;
    }
    order[k] = d;
  }
  for (int k = 0; k < g.ndim; ++k) {
    const int d = order[k];
    g.in_sizes[k] = in.sizes[d];
    g.out_sizes[k] = out.sizes[d];
    g.in_strides[k] = in.strides[d];
    g.out_strides[k] = out.strides[d];
    g.before[k] = spec.before[d];
  }
  const int64_t in_numel = in.numel(), out_numel = out.numel();
  g.narrow = in_numel > 0 && out_numel > 0 && in_numel < kNarrowIndexLimit &&
             out_numel < kNarrowIndexLimit;
  set_pad_dividers(g);
  return g;
}

// The input index output index o reads, or -1 (a constant pad's value).
LOOM_HOST_DEVICE inline int64_t pad_source(int64_t o, int64_t before, int64_t in, PadMode mode) {
  const int64_t i = o - before;
  if (i >= 0 && i < in) return i;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Replicate: return i < 0 ? 0 : in - 1;
    case PadMode::Reflect: return i < 0 ? -i : 2 * (in - 1) - i;
  }
  return -1;
}

struct PadOffsets {
  int64_t out;  // the output element's offset
  int64_t in;   // the input element it reads, or -1
};

// Offsets of output element `linear` (row-major over the dims in PadDims' order).
LOOM_HOST_DEVICE inline PadOffsets pad_offsets(const PadDims& g, int64_t linear) {
  PadOffsets r{0, 0};
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t o = split_index(&linear, g.out_sizes[d], g.out_dividers[d], g.narrow);
    r.out += o * g.out_strides[d];
    const int64_t i = pad_source(o, g.before[d], g.in_sizes[d], g.mode);
    if (i < 0 || r.in < 0) {
      r.in = -1;
    } else {
      r.in += i * g.in_strides[d];
    }
  }
  return r;
}

// The output indices of a dim that read input index i: up to three runs
// [begin, end), in increasing order (left edge, i itself, right edge).
struct PadRuns {
  int count = 0;
  int64_t begin[3] = {}, end[3] = {};

  LOOM_HOST_DEVICE void add(int64_t b, int64_t e, int64_t out) {
    b = b < 0 ? 0 : b;
    e = e > out ? out : e;
    if (b < e) {
      begin[count] = b;
      end[count] = e;
      ++count;
    }
  }
};

LOOM_HOST_DEVICE inline PadRuns pad_runs(int64_t i, int64_t before, int64_t in, int64_t out,
                                         PadMode mode) {
  PadRuns runs;
  if (mode == PadMode::Reflect && i >= 1) runs.add(before - i, before - i + 1, out);
  if (mode == PadMode::Replicate && i == 0) runs.add(0, before, out);
  runs.add(before + i, before + i + 1, out);
  if (mode == PadMode::Reflect && i <= in - 2) {
    runs.add(before + 2 * (in - 1) - i, before + 2 * (in - 1) - i + 1, out);
  }
  if (mode == PadMode::Replicate && i == in - 1) runs.add(in + before, out, out);
  return runs;
}

// dx at input element `linear` (row-major in PadDims' order): the sum of dy (load(offset) gives
// one element, in the accumulating type Acc) over every output element that
// read it, dims walked as an odometer, last dim fastest. *dx_offset gets the
// element's offset in dx.
template <class Acc, class Load>
LOOM_HOST_DEVICE Acc pad_grad_sum(const PadDims& g, int64_t linear, int64_t* dx_offset,
                                  const Load& load) {
  PadRuns runs[kPadMaxDims];
  int64_t o[kPadMaxDims];
  int run[kPadMaxDims];
  bool empty = false;
  *dx_offset = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t i = split_index(&linear, g.in_sizes[d], g.in_dividers[d], g.narrow);
    *dx_offset += i * g.in_strides[d];
    runs[d] = pad_runs(i, g.before[d], g.in_sizes[d], g.out_sizes[d], g.mode);
    empty = empty || runs[d].count == 0;
    run[d] = 0;
    o[d] = runs[d].begin[0];
  }
  Acc sum = Acc(0);
  if (empty) return sum;
  for (;;) {
    int64_t offset = 0;
    for (int d = 0; d < g.ndim; ++d) offset += o[d] * g.out_strides[d];
    sum += load(offset);
    int d = g.ndim - 1;
    for (; d >= 0; --d) {
      if (++o[d] < runs[d].end[run[d]]) break;
      if (++run[d] < runs[d].count) {
        o[d] = runs[d].begin[run[d]];
        break;
      }
      run[d] = 0;
      o[d] = runs[d].begin[0];
    }
    if (d < 0) return sum;
  }
}

}  // namespace loom::kernel::math
