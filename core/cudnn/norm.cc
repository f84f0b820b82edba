#include "core/cudnn/norm.h"

#include <fmt/format.h>

#include "core/cudnn/context.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

enum Uid : int64_t {
  kX = 1, kScale, kBias, kEpsilon, kMomentum, kInMean, kInVar,
  kY, kMean, kInvVar, kOutMean, kOutVar, kDy, kDx, kDScale, kDBias,
};

int64_t channels(const Strided& x) { return x.sizes[1]; }

// 4-D view of (N, C) and (N, C, L) inputs; cuDNN's BN graphs are 4-D.
Strided as_4d(const Strided& t) {
  Strided v = t;
  while (v.sizes.size() < 4) {
    v.sizes.push_back(1);
    v.strides.push_back(1);
  }
  return v;
}

struct ForwardPlan {
  std::shared_ptr<const Plan> plan;
  PlanKey key;
  std::string name;
};

ForwardPlan forward_plan(const BatchNormTrainingArgs& a) {
  Strided x = as_4d(a.x), y = as_4d(a.y);
  TensorSpec xs = spec_of(x, kX), ys = spec_of(y, kY);
  PlanKey key(GraphKind::BatchNormForward, numerics_policy());
  key.add_tensor(xs).add_tensor(ys);
  for (const Strided* t : {&a.weight, &a.bias, &a.running_mean, &a.running_var, &a.save_mean, &a.save_invstd}) {
    key.add(pointer_alignment(t->data));
  }
  std::string name = fmt::format("bn_fwd_train x{}", describe(x));
  int64_t c = channels(x);
  auto plan = PlanCache::global().get(key, [&] {
    Graph g(name);
    g.add_tensor(xs);
    g.add_tensor(ys);
    g.add_tensor(channel_spec(c, kScale, a.weight.data));
    g.add_tensor(channel_spec(c, kBias, a.bias.data));
    g.add_tensor(channel_spec(c, kInMean, a.running_mean.data));
    g.add_tensor(channel_spec(c, kInVar, a.running_var.data));
    g.add_tensor(channel_spec(c, kOutMean, a.running_mean.data));
    g.add_tensor(channel_spec(c, kOutVar, a.running_var.data));
    g.add_tensor(channel_spec(c, kMean, a.save_mean.data));
    g.add_tensor(channel_spec(c, kInvVar, a.save_invstd.data));
    g.add_tensor(scalar_spec(kEpsilon, 1e-5));
    g.add_tensor(scalar_spec(kMomentum, 0.1));
    g.batch_norm_forward({.x = kX, .scale = kScale, .bias = kBias, .epsilon = kEpsilon,
                          .momentum = kMomentum, .in_running_mean = kInMean,
                          .in_running_var = kInVar, .y = kY, .mean = kMean,
                          .inv_variance = kInvVar, .out_running_mean = kOutMean,
                          .out_running_var = kOutVar});
    return g;
  }, /*precision_filter_applies=*/false);
  return {plan, key, name};
}

}  // namespace

bool batch_norm_training_supported(const BatchNormTrainingArgs& args) {
  return forward_plan(args).plan != nullptr;
}

void batch_norm_forward_training(const BatchNormTrainingArgs& a) {
  ForwardPlan fp = forward_plan(a);
  LOOM_CHECK(fp.plan != nullptr, CudnnError, "[batch_norm] cuDNN has no engine for {} ({})", fp.name,
             PlanCache::global().why_unsupported(fp.key));
  float eps = static_cast<float>(a.eps), momentum = static_cast<float>(a.momentum);
  // The running statistics are read and written in place: each channel's update
  // reads only its own old value.
  fp.plan->execute(handle(),
                   {{kX, a.x.data}, {kY, a.y.data}, {kScale, a.weight.data}, {kBias, a.bias.data},
                    {kInMean, a.running_mean.data}, {kInVar, a.running_var.data},
                    {kOutMean, a.running_mean.data}, {kOutVar, a.running_var.data},
                    {kMean, a.save_mean.data}, {kInvVar, a.save_invstd.data},
                    {kEpsilon, &eps}, {kMomentum, &momentum}},
                   workspace(static_cast<size_t>(fp.plan->workspace_bytes())));
}

void batch_norm_backward(const BatchNormBackwardArgs& a) {
  Strided x = as_4d(a.x), dy = as_4d(a.dy), dx = as_4d(a.dx);
  TensorSpec xs = spec_of(x, kX), dys = spec_of(dy, kDy), dxs = spec_of(dx, kDx);
  PlanKey key(GraphKind::BatchNormBackward, numerics_policy());
  key.add_tensor(xs).add_tensor(dys).add_tensor(dxs);
  for (const Strided* t : {&a.weight, &a.save_mean, &a.save_invstd, &a.dweight, &a.dbias}) {
    key.add(pointer_alignment(t->data));
  }
  std::string name = fmt::format("bn_bwd x{} dy{}", describe(x), describe(dy));
  int64_t c = channels(x);
  auto plan = PlanCache::global().get(key, [&] {
    Graph g(name);
    g.add_tensor(xs);
    g.add_tensor(dys);
    g.add_tensor(dxs);
    g.add_tensor(channel_spec(c, kScale, a.weight.data));
    g.add_tensor(channel_spec(c, kMean, a.save_mean.data));
    g.add_tensor(channel_spec(c, kInvVar, a.save_invstd.data));
    g.add_tensor(channel_spec(c, kDScale, a.dweight.data));
    g.add_tensor(channel_spec(c, kDBias, a.dbias.data));
    g.batch_norm_backward({.x = kX, .dy = kDy, .scale = kScale, .mean = kMean,
                           .inv_variance = kInvVar, .dx = kDx, .dscale = kDScale, .dbias = kDBias});
    return g;
  }, /*precision_filter_applies=*/false);
  LOOM_CHECK(plan != nullptr, CudnnError, "[batch_norm] cuDNN has no backward engine for {} ({})",
             name, PlanCache::global().why_unsupported(key));
  plan->execute(handle(),
                {{kX, a.x.data}, {kDy, a.dy.data}, {kDx, a.dx.data}, {kScale, a.weight.data},
                 {kMean, a.save_mean.data}, {kInvVar, a.save_invstd.data},
                 {kDScale, a.dweight.data}, {kDBias, a.dbias.data}},
                workspace(static_cast<size_t>(plan->workspace_bytes())));
}

}  // namespace loom::cudnn
