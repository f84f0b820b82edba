// File: distributed/sync_batch_norm.cc
// The process-group ReplicaReduce behind SyncBatchNorm and convert_sync_batchnorm.
#include "distributed/sync_batch_norm.h"

#include <utility>

#include "core/error.h"

namespace loom::nn {

namespace {

class GroupReduce final : public ReplicaReduce {
 public:
  explicit GroupReduce(std::shared_ptr<distributed::ProcessGroup> group) : group_(std::move(group)) {}

  void all_reduce_sum(const Tensor& t) override { group_->all_reduce(t, distributed::ReduceOp::Sum); }

  Tensor all_gather(const Tensor& local) override {
    Shape sizes = local.sizes();
    sizes[0] *= group_->size();
    Tensor out = empty(sizes, {.dtype = local.dtype(), .device = local.device()});
    group_->all_gather(out, local.contiguous());
    return out;
  }

 private:
  std::shared_ptr<distributed::ProcessGroup> group_;
};

}  // namespace

std::shared_ptr<ReplicaReduce> replica_reduce(std::shared_ptr<distributed::ProcessGroup> group) {
  LOOM_CHECK(group != nullptr, ValueError, "[SyncBatchNorm] the process group is null");
  return std::make_shared<GroupReduce>(std::move(group));
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<distributed::ProcessGroup> group,
                             BatchNorm2dOptions options)
    : BatchNorm2d(num_features, options) {
  set_replica_reduce(nn::replica_reduce(std::move(group)));
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() >= 2, ShapeError,
             "[SyncBatchNorm] expects input (N, C, ...), got shape {}",
             x.defined() ? shape_str(x.sizes()) : "undefined");
  return normalize(x);
}

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<distributed::ProcessGroup> group) {
  LOOM_CHECK(module != nullptr, ValueError, "[convert_sync_batchnorm] the module is null");
  const std::shared_ptr<ReplicaReduce> reduce = replica_reduce(std::move(group));
  auto convert = [&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_replica_reduce(reduce);
  };
  convert(*module);
  for (auto& [name, child] : module->named_modules()) convert(*child);
  return module;
}

}  // namespace loom::nn
