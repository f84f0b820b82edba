// File: core/onednn/pool.cc
// The pooling plans (pool.h): PyTorch's output size through oneDNN's right
// padding, a forward per propagation kind, and a backward hinted by the
// training forward.
//
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/onednn/pool.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/onednn/library.h"
#include "core/onednn/plan.h"

namespace loom::onednn {
namespace {

// The geometry of one pooling: padding on the right of each dim such that
// oneDNN's floor((H + pad_l + pad_r - kernel) / stride) + 1 is PyTorch's P
// (with ceil_mode's last window, P can need more right padding than left).
struct PoolShape {
  dnnl_memory_desc_t x, y;
  dnnl_dims_t strides, kernel, dilation, pad_l, pad_r;
  dnnl_alg_kind_t alg;
  Key key;
};

int64_t right_pad(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad) {
  return std::max(pad, (out - 1) * stride + kernel - in - pad);
}

std::optional<PoolShape> pool_shape(std::string_view kind, const Strided& x, const Strided& y,
                                    const kernel::Pool2dParams& p, bool training) {
  // Channels-last only (pool.h says why); a tensor dense in both layouts (one
  // channel, 1x1 planes) counts.
  auto channels_last = [](const Strided& t) {
    return t.dim() == 4 && has_layout(t.sizes, t.strides, MemoryFormat::ChannelsLast);
  };
  if (!takes(x.dtype) || !channels_last(x) || !channels_last(y) || y.numel() == 0) return std::nullopt;
  PoolShape s{md_tag(x.sizes, dnnl_acdb), md_tag(y.sizes, dnnl_acdb), {p.stride_h, p.stride_w},
              {p.kernel_h, p.kernel_w}, {0, 0},
              {p.pad_h, p.pad_w}, {right_pad(x.sizes[2], y.sizes[2], p.kernel_h, p.stride_h, p.pad_h),
                                   right_pad(x.sizes[3], y.sizes[3], p.kernel_w, p.stride_w, p.pad_w)},
              p.max ? dnnl_pooling_max
                    : p.count_include_pad ? dnnl_pooling_avg_include_padding
                                          : dnnl_pooling_avg_exclude_padding,
              {kind, {}}};
  // oneDNN divides by the whole window with padding counted; PyTorch by the
  // window clipped to the padded input, smaller where ceil_mode adds a window.
  const bool padded_beyond = s.pad_r[0] != p.pad_h || s.pad_r[1] != p.pad_w;
  if (!p.max && p.count_include_pad && padded_beyond) return std::nullopt;
  s.key.ints = {x.sizes[0], x.sizes[1], x.sizes[2], x.sizes[3], y.sizes[2], y.sizes[3],
                p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                s.pad_r[0], s.pad_r[1], s.alg, training};
  return s;
}

PrimitiveDesc forward_pd(const PoolShape& s, dnnl_prop_kind_t prop) {
  dnnl_pooling_v2_desc_t desc;
  if (!described(library()->pooling_forward_desc_init(&desc, prop, s.alg, &s.x, &s.y, s.strides,
                                                      s.kernel, s.dilation, s.pad_l, s.pad_r))) {
    return nullptr;
  }
  return make_primitive_desc(&desc, make_attr());
}

// A training max pooling records its workspace for the backward.
bool keeps_workspace(const kernel::Pool2dParams& p, bool training) { return p.max && training; }

std::shared_ptr<Plan> build_forward(const PoolShape& s, const kernel::Pool2dParams& p, bool training) {
  const PrimitiveDesc pd = forward_pd(s, training ? dnnl_forward_training : dnnl_forward_inference);
  if (!pd) return nullptr;
  std::vector<UserOperand> ops = {{DNNL_ARG_SRC, false, s.x}, {DNNL_ARG_DST, true, s.y}};
  if (keeps_workspace(p, training)) ops.push_back({DNNL_ARG_WORKSPACE, true, {}});
  return make_plan(pd, ops);
}

std::shared_ptr<Plan> build_backward(const PoolShape& s, const kernel::Pool2dParams& p) {
  const PrimitiveDesc hint = forward_pd(s, dnnl_forward_training);
  if (!hint) return nullptr;
  dnnl_pooling_v2_desc_t desc;
  if (!described(library()->pooling_backward_desc_init(&desc, s.alg, &s.x, &s.y, s.strides,
                                                       s.kernel, s.dilation, s.pad_l, s.pad_r))) {
    return nullptr;
  }
  const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), hint.get());
  if (!pd) return nullptr;
  std::vector<UserOperand> ops = {{DNNL_ARG_DIFF_DST, false, s.y}, {DNNL_ARG_DIFF_SRC, true, s.x}};
  if (p.max) ops.push_back({DNNL_ARG_WORKSPACE, false, {}});
  return make_plan(pd, ops);
}

std::shared_ptr<const Plan> forward_plan(const Strided& y, const Strided& x, const kernel::Pool2dParams& p,
                                         bool training) {
  std::optional<PoolShape> s = pool_shape("pool_forward", x, y, p, training);
  if (!s) return nullptr;
  return cached_plan(s->key, [&] { return build_forward(*s, p, training); });
}

// A backward follows a training forward.
std::shared_ptr<const Plan> backward_plan(const Strided& dx, const Strided& dy, const kernel::Pool2dParams& p) {
  std::optional<PoolShape> s = pool_shape("pool_backward", dx, dy, p, /*training=*/true);
  if (!s) return nullptr;
  return cached_plan(s->key, [&] { return build_backward(*s, p); });
}

}  // namespace

std::optional<int64_t> pool2d_workspace_bytes(const Strided& y, const Strided& x, const kernel::Pool2dParams& params,
                                              bool training) {
  std::shared_ptr<const Plan> plan = forward_plan(y, x, params, training);
  if (!plan || (training && !backward_plan(x, y, params))) return std::nullopt;
  return keeps_workspace(params, training) ? static_cast<int64_t>(plan->bytes(DNNL_ARG_WORKSPACE)) : 0;
}

bool pool2d_forward(const Strided& y, const Strided& x, void* workspace, const kernel::Pool2dParams& params,
                    bool training) {
  std::shared_ptr<const Plan> plan = forward_plan(y, x, params, training);
  if (!plan) return false;
  std::vector<std::pair<int, void*>> buffers = {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data}};
  if (keeps_workspace(params, training)) buffers.emplace_back(DNNL_ARG_WORKSPACE, workspace);
  execute(*plan, buffers);
  return true;
}

bool pool2d_backward(const Strided& dx, const Strided& dy, const void* workspace, const kernel::Pool2dParams& params) {
  std::shared_ptr<const Plan> plan = backward_plan(dx, dy, params);
  if (!plan) return false;
  std::vector<std::pair<int, void*>> buffers = {{DNNL_ARG_DIFF_DST, dy.data}, {DNNL_ARG_DIFF_SRC, dx.data}};
  if (params.max) buffers.emplace_back(DNNL_ARG_WORKSPACE, const_cast<void*>(workspace));
  execute(*plan, buffers);
  return true;
}

}  // namespace loom::onednn
