// File: core/cpu/pad.cc
// Pad loops: one output element (forward) or one input element's gradient
// (backward) per index, split over the thread pool; the index math is
// core/kernel/pad.h's, shared with the CUDA kernels.
#include "core/cpu/pad.h"

#include "core/dtype.h"
#include "core/kernel/pad.h"
#include "core/parallel.h"

namespace loom::cpu {

namespace {

// Elements per parallel chunk: each costs a few divisions per dim.
constexpr int64_t kPadGrain = 1 << 14;

}  // namespace

void pad(const Strided& out, const Strided& in, const kernel::PadSpec& spec) {
  const kernel::math::PadDims g = kernel::math::pad_dims(out, in, spec);
  visit_dtype(out.dtype, [&]<class T>() {
    T* y = out.ptr<T>();
    const T* x = in.ptr<T>();
    const T value = from_double<T>(spec.value);
    parallel_for(0, out.numel(), kPadGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const kernel::math::PadOffsets at = kernel::math::pad_offsets(g, i);
        y[at.out] = at.in < 0 ? value : x[at.in];
      }
    });
  });
}

void pad_backward(const Strided& dx, const Strided& dy, const kernel::PadSpec& spec) {
  const kernel::math::PadDims g = kernel::math::pad_dims(dy, dx, spec, /*writes_input=*/true);
  visit_float(dx.dtype, [&]<class T>() {
    T* gx = dx.ptr<T>();
    const T* gy = dy.ptr<T>();
    parallel_for(0, dx.numel(), kPadGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t offset = 0;
        const T sum = kernel::math::pad_grad_sum<T>(g, i, &offset, [gy](int64_t o) { return gy[o]; });
        gx[offset] = sum;
      }
    });
  });
}

}  // namespace loom::cpu
