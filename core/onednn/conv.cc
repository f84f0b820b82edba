// File: core/onednn/conv.cc
// The convolution plans (conv.h): one op descriptor per direction, all three
// from the same memory descriptors, the backward ones hinted by the forward.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output,
// G groups.
#include "core/onednn/conv.h"

#include <oneapi/dnnl/dnnl.h>

#include <optional>
#include <string_view>

#include "core/onednn/library.h"
#include "core/onednn/plan.h"

namespace loom::onednn {
namespace {

enum class Direction { Forward, Dgrad, Wgrad };

// What every direction shares: the geometry and the user layouts.
struct ConvShape {
  Shape x_dims, w_dims, y_dims;  // w_dims (G, K/G, C/G, R, S) when grouped
  dnnl_memory_desc_t x_user, w_user, y_user;
  dnnl_dims_t strides, dilates, pad;  // oneDNN counts dilation from 0 (none)
  bool bias = false, relu = false;
  MemoryFormat layout = MemoryFormat::Contiguous;  // the activations' (x, y, dx, dy)
  Key key;
};

// A dense 1-D vector (bias, db), as the primitives read and write them.
bool is_vector(const Strided& v) { return v.dim() == 1 && dense_format(v).has_value(); }

// The weight (K, C/G, R, S) as oneDNN's grouped (G, K/G, C/G, R, S) view.
dnnl_memory_desc_t grouped_weight(const Strided& w, int64_t g) {
  if (g == 1) return md_of(w);
  Strided view = w;
  view.sizes = {g, w.sizes[0] / g, w.sizes[1], w.sizes[2], w.sizes[3]};
  view.strides = {w.strides[0] * (w.sizes[0] / g), w.strides[0], w.strides[1], w.strides[2],
                  w.strides[3]};
  return md_of(view);
}

// The shape of a convolution whose activations are x (N, C, H, W) and y
// (N, K, P, Q); nothing when an operand is empty or not dense in NCHW / NHWC.
std::optional<ConvShape> conv_shape(std::string_view kind, const Strided& x, const Strided& w,
                                    const Strided& y, const kernel::ConvParams& p) {
  if (x.dtype != DType::Float32 || x.numel() == 0 || y.numel() == 0 || w.numel() == 0) return std::nullopt;
  const std::optional<MemoryFormat> xf = dense_format(x), yf = dense_format(y), wf = dense_format(w);
  if (!xf || !yf || !wf || *xf != *yf) return std::nullopt;
  ConvShape s;
  s.layout = *xf;
  s.x_dims = x.sizes;
  s.y_dims = y.sizes;
  s.w_dims = p.groups == 1 ? w.sizes
                           : Shape{p.groups, w.sizes[0] / p.groups, w.sizes[1], w.sizes[2], w.sizes[3]};
  s.x_user = md_of(x);
  s.y_user = md_of(y);
  s.w_user = grouped_weight(w, p.groups);
  s.strides[0] = p.stride_h, s.strides[1] = p.stride_w;
  s.dilates[0] = p.dilation_h - 1, s.dilates[1] = p.dilation_w - 1;
  s.pad[0] = p.pad_h, s.pad[1] = p.pad_w;
  s.key.kind = kind;
  s.key.ints = {x.sizes[0], x.sizes[1], x.sizes[2], x.sizes[3], y.sizes[1], y.sizes[2], y.sizes[3],
                w.sizes[2], w.sizes[3], p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                p.dilation_w, p.groups, static_cast<int64_t>(*xf), static_cast<int64_t>(*wf)};
  return s;
}

// The primitive's own layouts: channels-last activations as they are, NCHW
// ones in the blocked layout oneDNN picks (nChw16c and kin), and the weights in
// its choice too.
struct InnerMds {
  dnnl_memory_desc_t x, w, y, bias;
};

InnerMds inner_mds(const ConvShape& s, bool blocked) {
  const bool nhwc = s.layout == MemoryFormat::ChannelsLast && !blocked;
  InnerMds m{nhwc ? md_tag(s.x_dims, dnnl_acdb) : md_any(s.x_dims), md_any(s.w_dims),
             nhwc ? md_tag(s.y_dims, dnnl_acdb) : md_any(s.y_dims), {}};
  if (s.bias) m.bias = md_tag({s.y_dims[1]}, dnnl_a);
  return m;
}

// The channels-last data gradients that run in the blocked layout instead,
// reordered in and out: oneDNN's NHWC data-gradient kernel slows down by up to
// 4x when dy has a multiple of 512 channels (pixel rows of 2 KiB: cache-set
// conflicts, by the look of it) on maps of 24x24 and more. Measured on 2
// threads (AVX-512), 3x3 stride-1 convolutions, batch 4-8, min of 3 runs,
// NHWC against blocked without its reorders: K 512 at 24x24 1.4x, 26-30 1.7-2.0x,
// 35-56 1.1-1.2x, 14-21 0.95-1.0x; K 1024 at 28x28 4.3x; K 384, 448, 640, 768
// at 28x28 0.9-1.05x. VGG's 512-channel 28x28 layers at 224x224 are the case
// (vgg11_bn batch 8: 261 against 130 ms a data gradient).
bool dgrad_runs_blocked(const ConvShape& s) {
  const int64_t k = s.y_dims[1], p = s.y_dims[2], q = s.y_dims[3];
  const bool plain_3x3 = s.w_dims.size() == 4 && s.w_dims[2] == 3 && s.w_dims[3] == 3 &&
                         s.strides[0] == 1 && s.strides[1] == 1 && s.dilates[0] == 0 && s.dilates[1] == 0;
  return s.layout == MemoryFormat::ChannelsLast && plain_3x3 && k % 512 == 0 && p >= 24 && q >= 24;
}

// The forward primitive descriptor (also the backward ones' hint); null where
// oneDNN cannot describe the geometry: its padding is symmetric, so an input
// row no window reaches (a transposed convolution's output_padding at stride
// 1) has no description.
PrimitiveDesc forward_pd(const ConvShape& s, const InnerMds& m) {
  dnnl_convolution_desc_t desc;
  if (!described(library()->convolution_forward_desc_init(
          &desc, dnnl_forward_training, dnnl_convolution_direct, &m.x, &m.w,
          s.bias ? &m.bias : nullptr, &m.y, s.strides, s.dilates, s.pad, s.pad))) {
    return nullptr;
  }
  return make_primitive_desc(&desc, make_attr(s.relu ? dnnl_eltwise_relu : dnnl_alg_kind_undef));
}

// The implementation a weight gradient prefers over oneDNN's order, or none.
// A 1x1 filter's weight gradient is one matrix product, dW = dY^T X over the
// N * P * Q output pixels, which "gemm:jit" runs without unfolding the input;
// its threads sum their partial products in OpenMP's own barrier, which sleeps
// under OMP_WAIT_POLICY=PASSIVE. oneDNN lists it after jit_1x1:avx2 (the tier
// skips the avx512 kernels, plan.cc), whose threads reduce behind a spinning
// barrier too: mobilenet_v2's (8, 24, 56, 56) -> 144 weight gradient,
// channels-last, min of 20 runs at a load of 7 on 2 cores: jit_1x1:avx2 19.7
// ms on 2 threads (3.6 on 1), gemm:jit 2.4 (2.2 on 1), jit_1x1:avx512_core
// 9.9 (2.1 on 1).
std::string_view wgrad_preference(const ConvShape& s) {
  const bool pointwise = s.w_dims[s.w_dims.size() - 1] == 1 && s.w_dims[s.w_dims.size() - 2] == 1;
  return pointwise ? "gemm:jit" : std::string_view();
}

std::shared_ptr<Plan> build(const ConvShape& s, Direction direction) {
  const InnerMds m = inner_mds(s, direction == Direction::Dgrad && dgrad_runs_blocked(s));
  const PrimitiveDesc forward = forward_pd(s, m);
  if (!forward) return nullptr;
  if (direction == Direction::Forward) {
    std::vector<UserOperand> ops = {{DNNL_ARG_SRC, false, s.x_user},
                                    {DNNL_ARG_WEIGHTS, false, s.w_user},
                                    {DNNL_ARG_DST, true, s.y_user}};
    if (s.bias) ops.push_back({DNNL_ARG_BIAS, false, m.bias});
    return make_plan(forward, ops);
  }
  dnnl_convolution_desc_t desc;
  if (direction == Direction::Dgrad) {
    if (!described(library()->convolution_backward_data_desc_init(
            &desc, dnnl_convolution_direct, &m.x, &m.w, &m.y, s.strides, s.dilates, s.pad, s.pad))) {
      return nullptr;
    }
    const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), forward.get());
    if (!pd) return nullptr;
    return make_plan(pd, {{DNNL_ARG_DIFF_DST, false, s.y_user},
                          {DNNL_ARG_WEIGHTS, false, s.w_user},
                          {DNNL_ARG_DIFF_SRC, true, s.x_user}});
  }
  if (!described(library()->convolution_backward_weights_desc_init(
          &desc, dnnl_convolution_direct, &m.x, &m.w, s.bias ? &m.bias : nullptr, &m.y, s.strides,
          s.dilates, s.pad, s.pad))) {
    return nullptr;
  }
  const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), forward.get(), wgrad_preference(s));
  if (!pd) return nullptr;
  std::vector<UserOperand> ops = {{DNNL_ARG_SRC, false, s.x_user},
                                  {DNNL_ARG_DIFF_DST, false, s.y_user},
                                  {DNNL_ARG_DIFF_WEIGHTS, true, s.w_user}};
  if (s.bias) ops.push_back({DNNL_ARG_DIFF_BIAS, true, m.bias});
  return make_plan(pd, ops);
}

std::shared_ptr<const Plan> plan_for(ConvShape& s, Direction direction) {
  s.key.ints.push_back(s.bias);
  s.key.ints.push_back(s.relu);
  return cached_plan(s.key, [&] { return build(s, direction); });
}

}  // namespace

bool conv2d_forward(const Strided& y, const Strided& x, const Strided& w, const Strided* bias,
                    const kernel::ConvParams& p, bool relu) {
  if (!takes(x.dtype) || (bias != nullptr && !is_vector(*bias))) return false;
  std::optional<ConvShape> s = conv_shape("conv_forward", x, w, y, p);
  if (!s) return false;
  s->bias = bias != nullptr;
  s->relu = relu;
  std::shared_ptr<const Plan> plan = plan_for(*s, Direction::Forward);
  if (!plan) return false;
  std::vector<std::pair<int, void*>> buffers = {
      {DNNL_ARG_SRC, x.data}, {DNNL_ARG_WEIGHTS, w.data}, {DNNL_ARG_DST, y.data}};
  if (bias != nullptr) buffers.emplace_back(DNNL_ARG_BIAS, bias->data);
  execute(*plan, buffers);
  return true;
}

bool conv2d_dgrad(const Strided& dx, const Strided& dy, const Strided& w, const kernel::ConvParams& p) {
  if (!takes(dx.dtype)) return false;
  std::optional<ConvShape> s = conv_shape("conv_dgrad", dx, w, dy, p);
  if (!s) return false;
  std::shared_ptr<const Plan> plan = plan_for(*s, Direction::Dgrad);
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_DIFF_DST, dy.data}, {DNNL_ARG_WEIGHTS, w.data}, {DNNL_ARG_DIFF_SRC, dx.data}});
  return true;
}

bool conv2d_wgrad(const Strided& dw, const Strided* db, const Strided& dy, const Strided& x,
                  const kernel::ConvParams& p) {
  if (!takes(x.dtype) || (db != nullptr && !is_vector(*db))) return false;
  std::optional<ConvShape> s = conv_shape("conv_wgrad", x, dw, dy, p);
  if (!s) return false;
  s->bias = db != nullptr;
  std::shared_ptr<const Plan> plan = plan_for(*s, Direction::Wgrad);
  if (!plan) return false;
  std::vector<std::pair<int, void*>> buffers = {
      {DNNL_ARG_SRC, x.data}, {DNNL_ARG_DIFF_DST, dy.data}, {DNNL_ARG_DIFF_WEIGHTS, dw.data}};
  if (db != nullptr) buffers.emplace_back(DNNL_ARG_DIFF_BIAS, db->data);
  execute(*plan, buffers);
  return true;
}

}  // namespace loom::onednn
