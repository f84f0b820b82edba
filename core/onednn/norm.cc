// File: core/onednn/norm.cc
// The batch-normalization plans (norm.h): a forward (batch statistics, or
// given ones) and a backward, per layout and flag set.
//
// N batch, C channels, M = N * H * W values per channel.
#include "core/onednn/norm.h"

#include <oneapi/dnnl/dnnl.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/onednn/library.h"
#include "core/onednn/plan.h"

namespace loom::onednn {
namespace {

// The per-channel vector (C) element c, whatever its stride.
float& at(const Strided& v, int64_t c) { return v.ptr<float>()[c * v.strides[0]]; }

// A per-channel vector as the primitives read and write it: dense float32 (C).
// `data` points at v itself where it is dense, else at a copy (an output copy
// is written back by give_back).
struct Vector {
  std::vector<float> copy;
  void* data = nullptr;
};

Vector dense(const Strided& v, bool read) {
  Vector d;
  if (v.strides[0] == 1 || v.sizes[0] == 1) {
    d.data = v.data;
    return d;
  }
  d.copy.resize(v.sizes[0]);
  if (read) {
    for (int64_t c = 0; c < v.sizes[0]; ++c) d.copy[c] = at(v, c);
  }
  d.data = d.copy.data();
  return d;
}

void give_back(const Vector& d, const Strided& v) {
  for (size_t c = 0; c < d.copy.size(); ++c) at(v, static_cast<int64_t>(c)) = d.copy[c];
}

// The variance that normalizes by invstd with eps = 0: 1 / invstd^2.
std::vector<float> variance_of(const Strided& invstd) {
  std::vector<float> v(invstd.sizes[0]);
  for (int64_t c = 0; c < invstd.sizes[0]; ++c) {
    const double s = at(invstd, c);
    v[c] = static_cast<float>(1.0 / (s * s));
  }
  return v;
}

// The geometry and flags every batch-norm plan is keyed by.
struct BnShape {
  dnnl_memory_desc_t data, vector;
  Key key;
};

// The layout batch norm runs in here: channels-last (N, C, H, W) or (N, C);
// nothing for others (norm.h says why NCHW stays on the reference kernels).
// A tensor dense in both NCHW and NHWC (one channel, or 1x1 planes) counts as
// channels-last.
std::optional<dnnl_format_tag_t> bn_layout(const Strided& t) {
  if (t.dim() == 4 && has_layout(t.sizes, t.strides, MemoryFormat::ChannelsLast)) return dnnl_acdb;
  if (t.dim() == 2 && has_layout(t.sizes, t.strides, MemoryFormat::Contiguous)) return dnnl_ab;
  return std::nullopt;
}

// Every operand in batch norm's layout.
bool bn_layouts(std::initializer_list<const Strided*> operands) {
  for (const Strided* t : operands) {
    if (t->dtype != DType::Float32 || !bn_layout(*t)) return false;
  }
  return true;
}

std::optional<BnShape> bn_shape(std::string_view kind, const Strided& x, unsigned flags) {
  const std::optional<dnnl_format_tag_t> tag = bn_layout(x);
  if (!tag || x.numel() == 0) return std::nullopt;
  BnShape s{md_tag(x.sizes, *tag), md_tag({x.sizes[1]}, dnnl_a), {kind, x.sizes}};
  s.key.ints.push_back(flags);
  return s;
}

// oneDNN's normalization flags as one unsigned set (the enum's values are bits).
unsigned flag_if(bool on, dnnl_normalization_flags_t flag) { return on ? static_cast<unsigned>(flag) : 0u; }

unsigned affine_flags(bool scale, bool shift) {
  return flag_if(scale, dnnl_use_scale) | flag_if(shift, dnnl_use_shift);
}

PrimitiveDesc forward_pd(const BnShape& s, dnnl_prop_kind_t prop, float eps, unsigned flags) {
  dnnl_batch_normalization_desc_t desc;
  LOOM_DNNL_CHECK(library()->batch_normalization_forward_desc_init(&desc, prop, &s.data, eps, flags));
  return make_primitive_desc(&desc, make_attr());
}

// The forward's operands: data in and out, statistics (out when computed),
// scale and shift, the ReLU's workspace.
std::vector<UserOperand> forward_operands(const BnShape& s, unsigned flags) {
  const bool computes_stats = !(flags & dnnl_use_global_stats);
  std::vector<UserOperand> ops = {{DNNL_ARG_SRC, false, s.data},
                                  {DNNL_ARG_DST, true, s.data},
                                  {DNNL_ARG_MEAN, computes_stats, s.vector},
                                  {DNNL_ARG_VARIANCE, computes_stats, s.vector}};
  if (flags & dnnl_use_scale) ops.push_back({DNNL_ARG_SCALE, false, s.vector});
  if (flags & dnnl_use_shift) ops.push_back({DNNL_ARG_SHIFT, false, s.vector});
  if (flags & dnnl_fuse_norm_relu) ops.push_back({DNNL_ARG_WORKSPACE, true, {}});
  return ops;
}

std::shared_ptr<Plan> build_forward(const BnShape& s, dnnl_prop_kind_t prop, float eps, unsigned flags) {
  const PrimitiveDesc pd = forward_pd(s, prop, eps, flags);
  return pd ? make_plan(pd, forward_operands(s, flags)) : nullptr;
}

std::shared_ptr<Plan> build_backward(const BnShape& s, unsigned flags) {
  const PrimitiveDesc hint = forward_pd(s, dnnl_forward_training, 0.0f, flags);
  if (!hint) return nullptr;
  const bool affine = flags & (dnnl_use_scale | dnnl_use_shift);
  dnnl_batch_normalization_desc_t desc;
  LOOM_DNNL_CHECK(library()->batch_normalization_backward_desc_init(
      &desc, affine ? dnnl_backward : dnnl_backward_data, &s.data, &s.data, 0.0f, flags));
  const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), hint.get());
  if (!pd) return nullptr;
  std::vector<UserOperand> ops = {{DNNL_ARG_SRC, false, s.data},
                                  {DNNL_ARG_DIFF_DST, false, s.data},
                                  {DNNL_ARG_MEAN, false, s.vector},
                                  {DNNL_ARG_VARIANCE, false, s.vector},
                                  {DNNL_ARG_DIFF_SRC, true, s.data}};
  if (flags & dnnl_use_scale) {
    ops.push_back({DNNL_ARG_SCALE, false, s.vector});
    ops.push_back({DNNL_ARG_DIFF_SCALE, true, s.vector});
  }
  if (flags & dnnl_use_shift) {  // the shift is an argument, though the gradients do not read it
    ops.push_back({DNNL_ARG_SHIFT, false, s.vector});
    ops.push_back({DNNL_ARG_DIFF_SHIFT, true, s.vector});
  }
  return make_plan(pd, ops);
}

// Blends the running statistics (C) with the batch's, as the reference kernels.
void blend_running(const kernel::RunningStats& r, const std::vector<float>& mean,
                   const std::vector<float>& var, double m) {
  for (size_t c = 0; c < mean.size(); ++c) {
    float& rm = at(r.mean, static_cast<int64_t>(c));
    float& rv = at(r.var, static_cast<int64_t>(c));
    rm = static_cast<float>((1 - r.momentum) * rm + r.momentum * mean[c]);
    rv = static_cast<float>((1 - r.momentum) * rv + r.momentum * var[c] * m / (m - 1));
  }
}

bool is_vector(const std::optional<Strided>& v) {
  return !v || (v->dim() == 1 && v->dtype == DType::Float32);
}

}  // namespace

bool batch_norm_training_forward(const Strided& y, const Strided& save_mean,
                                 const Strided& save_invstd, const Strided& x,
                                 const std::optional<Strided>& weight,
                                 const std::optional<Strided>& bias, double eps,
                                 const std::optional<kernel::RunningStats>& running, bool relu) {
  if (!takes(x.dtype) || !is_vector(weight) || !is_vector(bias) || !bn_layouts({&x, &y})) return false;
  const unsigned flags = affine_flags(weight.has_value(), bias.has_value()) |
                         flag_if(relu, dnnl_fuse_norm_relu);
  std::optional<BnShape> s = bn_shape("batch_norm_training_forward", x, flags);
  if (!s) return false;
  const float eps_f = static_cast<float>(eps);
  s->key.ints.push_back(static_cast<int64_t>(std::bit_cast<uint32_t>(eps_f)));
  std::shared_ptr<const Plan> plan = cached_plan(s->key, [&] {
    return build_forward(*s, dnnl_forward_training, eps_f, flags);
  });
  if (!plan) return false;
  const int64_t c = x.sizes[1];
  std::vector<float> mean(c), var(c);
  std::vector<std::byte> workspace(plan->bytes(DNNL_ARG_WORKSPACE));
  std::vector<std::pair<int, void*>> buffers = {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data},
                                                {DNNL_ARG_MEAN, mean.data()},
                                                {DNNL_ARG_VARIANCE, var.data()},
                                                {DNNL_ARG_WORKSPACE, workspace.data()}};
  Vector w = weight ? dense(*weight, true) : Vector{}, b = bias ? dense(*bias, true) : Vector{};
  buffers.emplace_back(DNNL_ARG_SCALE, w.data);
  buffers.emplace_back(DNNL_ARG_SHIFT, b.data);
  execute(*plan, buffers);
  for (int64_t i = 0; i < c; ++i) {
    at(save_mean, i) = mean[i];
    at(save_invstd, i) = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[i]) + eps));
  }
  if (running) blend_running(*running, mean, var, static_cast<double>(x.numel() / c));
  return true;
}

bool batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias) {
  if (!takes(x.dtype) || !is_vector(weight) || !is_vector(bias) || !bn_layouts({&x, &y})) return false;
  const unsigned flags = affine_flags(weight.has_value(), bias.has_value()) | dnnl_use_global_stats;
  std::optional<BnShape> s = bn_shape("batch_norm_forward", x, flags);
  if (!s) return false;
  std::shared_ptr<const Plan> plan = cached_plan(s->key, [&] {
    return build_forward(*s, dnnl_forward_inference, 0.0f, flags);
  });
  if (!plan) return false;
  std::vector<float> var = variance_of(invstd);
  Vector m = dense(mean, true);
  Vector w = weight ? dense(*weight, true) : Vector{}, b = bias ? dense(*bias, true) : Vector{};
  execute(*plan, {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data}, {DNNL_ARG_MEAN, m.data},
                  {DNNL_ARG_VARIANCE, var.data()}, {DNNL_ARG_SCALE, w.data}, {DNNL_ARG_SHIFT, b.data}});
  return true;
}

bool batch_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training) {
  if (!takes(x.dtype) || !is_vector(weight) || !is_vector(dweight) || !is_vector(dbias) ||
      !bn_layouts({&x, &dx, &dy})) {
    return false;
  }
  // oneDNN gives the shift's gradient only beside the scale's: a bias without
  // a weight gets a unit scale.
  const bool scale = weight.has_value() || dbias.has_value() || dweight.has_value();
  const unsigned flags = affine_flags(scale, scale) | flag_if(!training, dnnl_use_global_stats);
  std::optional<BnShape> s = bn_shape("batch_norm_backward", x, flags);
  if (!s) return false;
  std::shared_ptr<const Plan> plan = cached_plan(s->key, [&] { return build_backward(*s, flags); });
  if (!plan) return false;
  const int64_t c = x.sizes[1];
  std::vector<float> var = variance_of(invstd), ones(weight ? 0 : c, 1.0f), zeros(c, 0.0f);
  std::vector<float> dscale(c), dshift(c);
  Vector m = dense(mean, true), w = weight ? dense(*weight, true) : Vector{};
  Vector dw = dweight ? dense(*dweight, false) : Vector{}, db = dbias ? dense(*dbias, false) : Vector{};
  execute(*plan, {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DIFF_DST, dy.data}, {DNNL_ARG_MEAN, m.data},
                  {DNNL_ARG_VARIANCE, var.data()}, {DNNL_ARG_DIFF_SRC, dx.data},
                  {DNNL_ARG_SCALE, weight ? w.data : ones.data()}, {DNNL_ARG_SHIFT, zeros.data()},
                  {DNNL_ARG_DIFF_SCALE, dweight ? dw.data : dscale.data()},
                  {DNNL_ARG_DIFF_SHIFT, dbias ? db.data : dshift.data()}});
  if (dweight) give_back(dw, *dweight);
  if (dbias) give_back(db, *dbias);
  return true;
}

}  // namespace loom::onednn
