// File: core/ops/dropout.cc
// dropout: each element times 0 or 1 / (1 - p), by Philox draws that the
// backward draws again from the same counters, so nothing but the counters is
// kept between them (PyTorch keeps a byte mask). dropout2d: an (N, C) mask of
// those values, broadcast, multiplied in forward and again, saved, in backward.
#include "core/ops/dropout.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/cpu/elementwise.h"
#include "core/cpu/philox.h"
#include "core/cuda/random.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/parallel.h"
#include "core/trace.h"

namespace loom {

namespace {

// Philox blocks per chunk of the pool: four values each, so a chunk holds the
// 32768 values of the elementwise loops' grain (core/cpu/loop.h). Each block is
// drawn from its own counter, so any thread count gives the same bits.
constexpr int64_t kMaskGrain = 8192;

// `in` times dropout's mask for the draws at `philox`, in in's layout: element
// i (row-major) is 0 where lane i % 4 of Philox block philox.first_block + i / 4
// is below p, else in[i] / (1 - p), so the GPU and the CPU give the same bits.
Tensor dropout_apply(const Tensor& in, double p, const cuda::PhiloxArgs& philox) {
  if (in.device().is_cuda()) {
    DeviceGuard guard(in.device());
    Tensor out = empty_like(in);
    cuda::dropout_apply(out.strided(), in.strided(), p, philox);
    return out;
  }
  const Tensor src = in.contiguous();  // the draws follow row-major order
  Tensor out = empty(src.sizes(), src.options());
  const int64_t n = out.numel();
  const double scale = 1.0 / (1.0 - p);
  visit_float(out.dtype(), [&]<class T>() {
    const T* x = src.data_ptr<T>();
    T* y = out.data_ptr<T>();
    parallel_for(0, (n + 3) / 4, kMaskGrain, [&](int64_t b0, int64_t b1) {
      const int64_t values = std::min(4 * b1, n) - 4 * b0;
      cpu::dropout_apply(philox.seed, philox.first_block + static_cast<uint64_t>(b0), values, p,
                         static_cast<T>(scale), x + 4 * b0, y + 4 * b0);
    });
  });
  return out.contiguous(in.suggest_memory_format());
}

// Reserves the draws of an n-element dropout on `device`.
cuda::PhiloxArgs dropout_draws(Generator& generator, int64_t n, Device device) {
  const auto blocks = static_cast<uint64_t>((n + 3) / 4);
  if (!device.is_cuda()) return {.seed = generator.seed(), .first_block = generator.reserve(blocks)};
  DeviceGuard guard(device);  // whether its stream is capturing
  return cuda::philox_draw(generator, blocks);
}

}  // namespace

// In evaluation (or with p = 0) both return x itself, which a trace does not record.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  trace::OpScope trace("dropout");
  check_float_tensor(x, "dropout");
  LOOM_CHECK(p >= 0.0 && p <= 1.0, ValueError,
             "[dropout] probability p must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  Generator& gen = generator != nullptr ? *generator : default_generator();
  const cuda::PhiloxArgs draws = dropout_draws(gen, x.numel(), x.device());
  Tensor y = dropout_apply(x, p, draws);
  if (needs_grad({x})) {
    record("dropout", {x}, y, [p, draws](const Tensor& dy) { return std::vector<Tensor>{dropout_apply(dy, p, draws)}; });
  }
  if (trace.recording()) trace.record({x}, y, {{"p", p}, {"training", int64_t{1}}});
  return y;
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator* generator) {
  trace::OpScope trace("dropout2d");
  check_float_tensor(x, "dropout2d");
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[dropout2d] x must be (N, C, H, W), got shape {}; for one image (C, H, W) use "
             "x.unsqueeze(0)",
             shape_str(x.sizes()));
  LOOM_CHECK(p >= 0.0 && p <= 1.0, ValueError,
             "[dropout2d] probability p must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  Generator& gen = generator != nullptr ? *generator : default_generator();
  TensorOptions mask_options = x.options();
  mask_options.requires_grad = false;
  mask_options.memory_format = MemoryFormat::Contiguous;
  // One value per (n, c), broadcast over the plane: dropout of ones is its mask
  // (1 * m == m), and mul's backward is dy * mask.
  const int64_t planes = x.size(0) * x.size(1);
  const Tensor mask = dropout_apply(ones({x.size(0), x.size(1), 1, 1}, mask_options), p,
                                    dropout_draws(gen, planes, x.device()))
                          .expand(x.sizes());
  Tensor y = empty_like(x);
  LOOM_KERNEL(y, binary, y.strided(), x.strided(), mask.strided(), kernel::BinaryOp::Mul);
  if (needs_grad({x})) {
    record("dropout2d", {x}, y, [mask](const Tensor& dy) {
      Tensor dx = empty_like(dy);
      LOOM_KERNEL(dx, binary, dx.strided(), dy.strided(), mask.strided(), kernel::BinaryOp::Mul);
      return std::vector<Tensor>{dx};
    }, {mask});
  }
  if (trace.recording()) trace.record({x}, y, {{"p", p}, {"training", int64_t{1}}});
  return y;
}

}  // namespace loom
