// File: core/ops/pad.cc
// pad: validation of the pad list against x's dims and the mode's limits, the
// kernel dispatch, and its backward beside it (a constant pad's gradient is the
// opposite crop; reflect and replicate gather what each input element fed).
#include "core/ops/pad.h"

#include <fmt/format.h>

#include "core/autograd.h"
#include "core/cpu/pad.h"
#include "core/cuda/pad.h"
#include "core/error.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/trace.h"

namespace loom {

namespace {

// Checks one padded dim of extent `in` against its pads for `mode`.
void check_dim_pads(const Tensor& x, int64_t dim, int64_t before, int64_t after, PadMode mode) {
  const int64_t in = x.size(dim), out = in + before + after;
  const std::string where =
      fmt::format("dim {} of x {} (size {}), padding ({}, {})", dim, shape_str(x.sizes()), in,
                  before, after);
  if (mode == PadMode::Constant) {
    LOOM_CHECK(out >= 0, ShapeError,
               "[pad] {}: the negative padding removes {} elements more than the dim has",
               where, -out);
    return;
  }
  LOOM_CHECK(out >= 1, ShapeError,
             "[pad] {}: {} padding leaves {} elements; it must leave at least 1", where,
             pad_mode_name(mode), out);
  LOOM_CHECK(mode != PadMode::Reflect || (before < in && after < in), ShapeError,
             "[pad] {}: reflect padding must be smaller than the dim it pads (it mirrors about "
             "the edge element once); use PadMode::Replicate, or pad in steps",
             where);
}

// The pad list as per-dim `before` offsets (dims of x; 0 where not padded).
kernel::PadSpec make_spec(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode,
                       double value) {
  LOOM_CHECK(x.defined(), ValueError, "[pad] x is an undefined tensor");
  LOOM_CHECK(!pads.empty() && pads.size() % 2 == 0, ValueError,
             "[pad] the pad list must hold (before, after) pairs, last dim first, e.g. {{left, "
             "right, top, bottom}}; got {} values",
             pads.size());
  const int64_t padded = static_cast<int64_t>(pads.size()) / 2;
  LOOM_CHECK(padded <= x.dim(), ShapeError,
             "[pad] {} pairs of pads for a {}-D x of shape {}: at most one pair per dim", padded,
             x.dim(), shape_str(x.sizes()));
  kernel::PadSpec spec{.mode = mode, .before = Shape(x.dim(), 0), .value = value};
  for (int64_t k = 0; k < padded; ++k) {
    const int64_t dim = x.dim() - 1 - k;
    check_dim_pads(x, dim, pads[2 * k], pads[2 * k + 1], mode);
    spec.before[dim] = pads[2 * k];
  }
  return spec;
}

// The result's sizes: each padded dim grows by its two pads.
Shape padded_sizes(const Tensor& x, const std::vector<int64_t>& pads) {
  Shape sizes = x.sizes();
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    sizes[sizes.size() - 1 - k] += pads[2 * k] + pads[2 * k + 1];
  }
  return sizes;
}

std::vector<int64_t> negated(const std::vector<int64_t>& pads) {
  std::vector<int64_t> out;
  for (int64_t p : pads) out.push_back(-p);
  return out;
}

}  // namespace

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
  }
  return "?";
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  trace::OpScope trace("pad");
  const kernel::PadSpec spec = make_spec(x, pads, mode, value);
  if (needs_grad({x})) check_float_tensor(x, "pad");
  Tensor out = empty(padded_sizes(x, pads), {.dtype = x.dtype(),
                                             .device = x.device(),
                                             .memory_format = x.suggest_memory_format()});
  LOOM_KERNEL(out, pad, out.strided(), x.strided(), spec);
  if (needs_grad({x})) {
    record("pad", {x}, out, [pads, spec, x_sizes = x.sizes(),
                             format = x.suggest_memory_format()](const Tensor& dy) {
      if (spec.mode == PadMode::Constant) return std::vector<Tensor>{pad(dy, negated(pads))};
      Tensor dx = empty(x_sizes,
                        {.dtype = dy.dtype(), .device = dy.device(), .memory_format = format});
      LOOM_KERNEL(dx, pad_backward, dx.strided(), dy.strided(), spec);
      return std::vector<Tensor>{dx};
    });
  }
  if (trace.recording()) {
    trace.record({x}, out, {{"pads", pads}, {"mode", std::string(pad_mode_name(mode))}, {"value", value}});
  }
  return out;
}

}  // namespace loom
