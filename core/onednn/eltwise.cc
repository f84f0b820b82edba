// File: core/onednn/eltwise.cc
// The activation and softmax plans (eltwise.h): which oneDNN algorithm
// computes each activation row, and the forward / backward pairs.
#include "core/onednn/eltwise.h"

#include <oneapi/dnnl/dnnl.h>

#include <bit>
#include <initializer_list>
#include <optional>

#include "core/onednn/library.h"
#include "core/onednn/plan.h"

namespace loom::onednn {
namespace {

using kernel::ActivationKind;

// oneDNN's algorithm for a row: one kind for both directions (a backward's
// hint must be the same algorithm), the *_use_dst_for_bwd kinds where the row
// saves its output. alpha is the algorithm's parameter as oneDNN names it.
struct Algorithm {
  dnnl_alg_kind_t kind;
  float alpha = 0;
};

// relu, leaky_relu, relu6 and hardtanh stay on the reference kernels: oneDNN's
// relu maps NaN to 0 where PyTorch keeps it, and so do eltwise_clip and
// eltwise_clip_v2 (NaN to the lower bound forward, a zero gradient backward;
// oneDNN 2.6, jit:avx512_core), and a compare-and-select pass is memory-bound
// either way (the reference loops vectorize at -O3). `parameter` is the row's
// first scalar.
std::optional<Algorithm> algorithm_of(ActivationKind kind, double parameter) {
  switch (kind) {
    case ActivationKind::Sigmoid: return Algorithm{dnnl_eltwise_logistic_use_dst_for_bwd};
    case ActivationKind::Tanh: return Algorithm{dnnl_eltwise_tanh_use_dst_for_bwd};
    case ActivationKind::Gelu: return Algorithm{dnnl_eltwise_gelu_erf};
    case ActivationKind::GeluTanh: return Algorithm{dnnl_eltwise_gelu_tanh};
    case ActivationKind::Silu: return Algorithm{dnnl_eltwise_swish, 1.0f};
    case ActivationKind::Elu: return Algorithm{dnnl_eltwise_elu, static_cast<float>(parameter)};
    case ActivationKind::Mish: return Algorithm{dnnl_eltwise_mish};
    case ActivationKind::Hardswish: return Algorithm{dnnl_eltwise_hardswish};
    case ActivationKind::Softplus:  // oneDNN 2.6's soft_relu has no beta
      if (parameter == 1.0) return Algorithm{dnnl_eltwise_soft_relu};
      return std::nullopt;
    default: return std::nullopt;
  }
}

// The operands as one flat vector when they are float32 and dense in one layout.
std::optional<dnnl_memory_desc_t> flat(std::initializer_list<const Strided*> operands) {
  const Strided& first = **operands.begin();
  const std::optional<MemoryFormat> f = dense_format(first);
  if (!f || first.dtype != DType::Float32 || first.numel() == 0) return std::nullopt;
  for (const Strided* t : operands) {
    if (t->sizes != first.sizes || dense_format(*t) != f || t->dtype != DType::Float32) return std::nullopt;
  }
  return md_tag({first.numel()}, dnnl_a);
}

PrimitiveDesc eltwise_forward_pd(const dnnl_memory_desc_t& md, const Algorithm& a) {
  dnnl_eltwise_desc_t desc;
  LOOM_DNNL_CHECK(library()->eltwise_forward_desc_init(&desc, dnnl_forward_training, a.kind, &md, a.alpha, 0.0f));
  return make_primitive_desc(&desc, make_attr());
}

bool uses_dst(dnnl_alg_kind_t kind) {
  return kind == dnnl_eltwise_logistic_use_dst_for_bwd || kind == dnnl_eltwise_tanh_use_dst_for_bwd;
}

Key eltwise_key(std::string_view kind, const Algorithm& a, int64_t n) {
  return {kind, {static_cast<int64_t>(a.kind), static_cast<int64_t>(std::bit_cast<uint32_t>(a.alpha)), n}};
}

// softmax's memory descriptor and key; nothing unless x and y are float32, dense
// alike. oneDNN 2.6's fast softmax wants the axis innermost in memory (the last
// dim, or channels in NHWC); other axes get its reference implementation,
// which make_primitive_desc declines.
struct SoftmaxShape {
  dnnl_memory_desc_t md;
  Key key;
};

std::optional<SoftmaxShape> softmax_shape(std::string_view kind, const Strided& a, const Strided& b,
                                          int64_t dim, bool log) {
  // An axis of one element is exact on the reference kernels (1, or 0 for
  // log-softmax), where oneDNN's float32 log of 1 is off by ~1e-6.
  const std::optional<MemoryFormat> f = dense_format(a);
  if (!takes(a.dtype) || !f || dense_format(b) != f || a.sizes != b.sizes || a.numel() == 0 ||
      a.dim() > 5 || a.sizes[dim] == 1) {
    return std::nullopt;
  }
  SoftmaxShape s{md_of(a), {kind, a.sizes}};
  s.key.ints.insert(s.key.ints.end(), {static_cast<int64_t>(*f), dim, log});
  return s;
}

PrimitiveDesc softmax_forward_pd(const SoftmaxShape& s, int64_t dim, bool log) {
  dnnl_softmax_v2_desc_t desc;
  LOOM_DNNL_CHECK(library()->softmax_forward_desc_init(
      &desc, dnnl_forward_training, log ? dnnl_softmax_log : dnnl_softmax_accurate, &s.md, &s.md,
      static_cast<int>(dim)));
  return make_primitive_desc(&desc, make_attr());
}

}  // namespace

bool activation_forward(const Strided& y, const Strided& x, ActivationKind kind,
                        const kernel::ActivationParameters& parameters) {
  const std::optional<Algorithm> a = algorithm_of(kind, parameters[0]);
  if (!a || !takes(x.dtype)) return false;
  const std::optional<dnnl_memory_desc_t> md = flat({&y, &x});
  if (!md) return false;
  std::shared_ptr<const Plan> plan = cached_plan(eltwise_key("eltwise_forward", *a, x.numel()), [&] {
    const PrimitiveDesc pd = eltwise_forward_pd(*md, *a);
    return pd ? make_plan(pd, {{DNNL_ARG_SRC, false, *md}, {DNNL_ARG_DST, true, *md}}) : nullptr;
  });
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data}});
  return true;
}

bool activation_backward(const Strided& dx, const Strided& dy, const Strided& saved,
                         ActivationKind kind, const kernel::ActivationParameters& parameters) {
  const std::optional<Algorithm> a = algorithm_of(kind, parameters[0]);
  if (!a || !takes(dx.dtype)) return false;
  const std::optional<dnnl_memory_desc_t> md = flat({&dx, &dy, &saved});
  if (!md) return false;
  const int saved_arg = uses_dst(a->kind) ? DNNL_ARG_DST : DNNL_ARG_SRC;
  std::shared_ptr<const Plan> plan = cached_plan(eltwise_key("eltwise_backward", *a, dx.numel()), [&] {
    const PrimitiveDesc hint = eltwise_forward_pd(*md, *a);
    if (!hint) return std::shared_ptr<Plan>();
    dnnl_eltwise_desc_t desc;
    LOOM_DNNL_CHECK(library()->eltwise_backward_desc_init(&desc, a->kind, &*md, &*md, a->alpha, 0.0f));
    const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), hint.get());
    if (!pd) return std::shared_ptr<Plan>();
    return make_plan(pd, {{DNNL_ARG_DIFF_DST, false, *md}, {saved_arg, false, *md},
                          {DNNL_ARG_DIFF_SRC, true, *md}});
  });
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_DIFF_DST, dy.data}, {saved_arg, saved.data}, {DNNL_ARG_DIFF_SRC, dx.data}});
  return true;
}

bool softmax_forward(const Strided& y, const Strided& x, int64_t dim, bool log) {
  std::optional<SoftmaxShape> s = softmax_shape("softmax_forward", x, y, dim, log);
  if (!s) return false;
  std::shared_ptr<const Plan> plan = cached_plan(s->key, [&] {
    const PrimitiveDesc pd = softmax_forward_pd(*s, dim, log);
    return pd ? make_plan(pd, {{DNNL_ARG_SRC, false, s->md}, {DNNL_ARG_DST, true, s->md}}) : nullptr;
  });
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data}});
  return true;
}

bool softmax_backward(const Strided& dx, const Strided& dy, const Strided& y, int64_t dim, bool log) {
  std::optional<SoftmaxShape> s = softmax_shape("softmax_backward", y, dx, dim, log);
  if (!s || dense_format(dy) != dense_format(y)) return false;
  std::shared_ptr<const Plan> plan = cached_plan(s->key, [&] {
    const PrimitiveDesc hint = softmax_forward_pd(*s, dim, log);
    if (!hint) return std::shared_ptr<Plan>();
    dnnl_softmax_v2_desc_t desc;
    LOOM_DNNL_CHECK(library()->softmax_backward_desc_init(
        &desc, log ? dnnl_softmax_log : dnnl_softmax_accurate, &s->md, &s->md, &s->md,
        static_cast<int>(dim)));
    const PrimitiveDesc pd = make_primitive_desc(&desc, make_attr(), hint.get());
    if (!pd) return std::shared_ptr<Plan>();
    return make_plan(pd, {{DNNL_ARG_DST, false, s->md}, {DNNL_ARG_DIFF_DST, false, s->md},
                          {DNNL_ARG_DIFF_SRC, true, s->md}});
  });
  if (!plan) return false;
  execute(*plan, {{DNNL_ARG_DST, y.data}, {DNNL_ARG_DIFF_DST, dy.data}, {DNNL_ARG_DIFF_SRC, dx.data}});
  return true;
}

}  // namespace loom::onednn
