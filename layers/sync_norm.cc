// File: layers/sync_norm.cc
// replica_batch_norm: the statistics of every replica's batch, combined from
// each one's (count, mean, sum of squared deviations), and the backward whose
// two per-channel sums go over the replicas.
// N batch, C channels, R replicas.
#include "layers/sync_norm.h"

#include <optional>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"

namespace loom::nn {

namespace {

// Every dim but the channels'.
Shape reduced_dims(const Tensor& x) {
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel (C) tensor shaped to broadcast against x: (1, C, 1, ...).
Tensor per_channel(const Tensor& c, const Tensor& x) {
  Shape shape(x.dim(), 1);
  shape[1] = c.size(0);
  return c.view(shape);
}

struct GlobalStats {
  Tensor mean, invstd;  // (C), float32 or float64
  Tensor m2;            // (C) sum of squared deviations over all replicas
  Tensor count;         // (C) elements per channel over all replicas (on the device: no
                        // read back, so a captured step can sync its batch norms)
};

// Chan et al.'s combination of the replicas' (count, mean, m2).
GlobalStats combine(const Tensor& xf, double eps, ReplicaReduce& reduce) {
  const int64_t c = xf.size(1);
  const Shape dims = reduced_dims(xf);
  const double n = static_cast<double>(xf.numel() / std::max<int64_t>(c, 1));
  // An empty shard (a batch split over more replicas than it has samples) adds
  // count 0 and finite zeros: its mean would be 0/0, and 0 * NaN in the sums
  // below would make every replica's statistics NaN.
  const TensorOptions stats_options{.dtype = xf.dtype(), .device = xf.device()};
  Tensor mean, m2;
  if (n > 0) {
    mean = loom::mean(xf, dims);
    Tensor centered = xf - per_channel(mean, xf);
    m2 = sum(centered * centered, dims);
  } else {
    mean = zeros({c}, stats_options);
    m2 = zeros({c}, stats_options);
  }
  Tensor counts = full({c}, n, stats_options);
  Tensor local = cat({counts.view({1, c}), mean.view({1, c}), m2.view({1, c})}, 0);  // (3, C)
  Tensor all = reduce.all_gather(local);  // (R * 3, C)
  const int64_t replicas = all.size(0) / 3;
  all = all.view({replicas, 3, c});
  Tensor rc = all.select(1, 0), rmean = all.select(1, 1), rm2 = all.select(1, 2);  // (R, C)
  GlobalStats g;
  g.count = sum(rc, {0});
  // Divided by at least 1: every replica's shard empty gives an empty output
  // (and no running update, update_running), not NaN statistics.
  const Tensor divisor = clamp(g.count, 1.0, std::nullopt);
  g.mean = sum(rc * rmean, {0}) / divisor;
  Tensor spread = rmean - g.mean.view({1, c});
  g.m2 = sum(rm2 + rc * spread * spread, {0});
  g.invstd = pow(g.m2 / divisor + eps, -0.5);
  return g;
}

void update_running(const ReplicaBatchNormArgs& args, const GlobalStats& g) {
  if (!args.running_mean.defined()) return;
  const double m = args.momentum;
  // PyTorch blends the unbiased variance into running_var.
  Tensor unbiased = g.m2 / clamp(g.count - 1.0, 1.0, std::nullopt);
  // No sample on any replica: the statistics stay as they are, as batch_norm's.
  const Tensor seen = g.count > 0.0;
  Tensor(args.running_mean)
      .copy_(where(seen, args.running_mean * (1.0 - m) + g.mean.to(args.running_mean.dtype()) * m,
                   args.running_mean));
  Tensor(args.running_var)
      .copy_(where(seen, args.running_var * (1.0 - m) + unbiased.to(args.running_var.dtype()) * m,
                   args.running_var));
}

}  // namespace

Tensor replica_batch_norm(const Tensor& x, const ReplicaBatchNormArgs& args,
                          std::shared_ptr<ReplicaReduce> reduce) {
  LOOM_CHECK(x.defined() && x.dim() >= 2, ShapeError,
             "[SyncBatchNorm] expects input (N, C, ...), got shape {}",
             x.defined() ? shape_str(x.sizes()) : "undefined");
  const bool half = x.dtype() == DType::BFloat16 || x.dtype() == DType::Float16;
  const DType compute = half ? DType::Float32 : x.dtype();
  const Tensor weight = args.weight, bias = args.bias;
  Tensor xhat, scale, count;
  Tensor y;
  {
    NoGradGuard no_grad;
    const Tensor xf = x.detach().to(compute);
    const GlobalStats g = combine(xf, args.eps, *reduce);
    update_running(args, g);
    count = g.count;
    xhat = (xf - per_channel(g.mean, xf)) * per_channel(g.invstd, xf);
    scale = weight.defined() ? g.invstd * weight.detach().to(compute) : g.invstd;
    Tensor yf = xhat;
    if (weight.defined()) yf = yf * per_channel(weight.detach().to(compute), xf);
    if (bias.defined()) yf = yf + per_channel(bias.detach().to(compute), xf);
    y = yf.to(x.dtype());
  }
  if (!needs_grad({x, weight, bias})) return y;
  const DType x_dtype = x.dtype();
  record("sync_batch_norm", {x, weight, bias}, y,
         [=](const Tensor& dy) -> std::vector<Tensor> {
           const Tensor dyf = dy.to(compute);
           const Shape dims = reduced_dims(dyf);
           const int64_t c = xhat.size(1);
           Tensor sum_dy = sum(dyf, dims), sum_dy_xhat = sum(dyf * xhat, dims);
           Tensor both = cat({sum_dy.view({1, c}), sum_dy_xhat.view({1, c})}, 0).contiguous();
           reduce->all_reduce_sum(both);  // (2, C) over the replicas
           Tensor mean_dy = both.select(0, 0) / count;
           Tensor mean_dy_xhat = both.select(0, 1) / count;
           Tensor dx = per_channel(scale, xhat) *
                       (dyf - per_channel(mean_dy, xhat) - xhat * per_channel(mean_dy_xhat, xhat));
           return {dx.to(x_dtype), weight.defined() ? sum_dy_xhat.to(weight.dtype()) : Tensor(),
                   bias.defined() ? sum_dy.to(bias.dtype()) : Tensor()};
         });
  return y;
}

}  // namespace loom::nn
