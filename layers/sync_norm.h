// File: layers/sync_norm.h
// Batch norm whose training statistics cover every replica's batch of a
// data-parallel job, as torch.nn.SyncBatchNorm: BatchNorm2d/1d call it once a
// ReplicaReduce is set on them (distributed/sync_batch_norm.h sets one from a process
// group). One process with the global batch and N replicas with a share each
// compute the same statistics, outputs and gradients (up to summation order).
//
// N batch, C channels, R replicas; statistics over every dim but C.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace loom::nn {

// Sums and gathers across the replicas of a data-parallel job. Every replica
// calls each method in the same order (they are collectives).
class ReplicaReduce {
 public:
  virtual ~ReplicaReduce() = default;
  // `t` summed over the replicas, in place.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // local (d0, ...) of every replica, stacked: (R * d0, ...), in rank order.
  virtual Tensor all_gather(const Tensor& local) = 0;
};

struct ReplicaBatchNormArgs {
  Tensor running_mean, running_var;  // updated in place when defined
  Tensor weight, bias;               // undefined: no affine
  double momentum = 0.1;             // for the running statistics
  double eps = 1e-5;
};

// Training-mode batch norm of x (N, C, ...) with the mean and variance of the
// replicas' batches together: each replica's mean and sum of squared
// deviations are gathered and combined (Chan's parallel formula), so large
// means cost no precision. Its backward sums dy and dy * x_hat over the
// replicas (the weight and bias gradients stay local, as DDP averages them).
// 16-bit inputs compute in float32.
Tensor replica_batch_norm(const Tensor& x, const ReplicaBatchNormArgs& args,
                          std::shared_ptr<ReplicaReduce> reduce);

}  // namespace loom::nn
