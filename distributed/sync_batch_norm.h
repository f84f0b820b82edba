// File: distributed/sync_batch_norm.h
// nn::SyncBatchNorm and nn::convert_sync_batchnorm, as PyTorch's: batch norm
// whose training statistics cover the global batch of a data-parallel job.
//
//   auto group = distributed::ProcessGroup::from_mpi();
//   auto net = std::make_shared<MyNet>();               // BatchNorm2d layers inside
//   nn::convert_sync_batchnorm(net, group);             // in place: every BatchNorm syncs
//   net->to(group->device());
//   nn::DistributedDataParallel ddp(net, group);
//
// Each training forward gathers every rank's per-channel (count, mean, sum of
// squared deviations) and each backward all-reduces two per-channel sums: N
// ranks with B samples each then match one process with BatchNorm2d on the
// global batch of N * B. Every rank must run the same BatchNorm layers in the
// same order (they are collectives).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "layers/norm.h"

namespace loom::nn {

// The ReplicaReduce of a process group's blocking collectives.
std::shared_ptr<ReplicaReduce> replica_reduce(std::shared_ptr<distributed::ProcessGroup> group);

class SyncBatchNorm final : public BatchNorm2d {
 public:
  SyncBatchNorm(int64_t num_features, std::shared_ptr<distributed::ProcessGroup> group,
                BatchNorm2dOptions options = {});
  // x (N, C, ...): any number of dims after C, as PyTorch's SyncBatchNorm.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SyncBatchNorm"; }
};

// Makes every BatchNorm2d and BatchNorm1d in `module` (itself included)
// synchronize its training statistics over `group`, in place: parameters,
// buffers, state_dict names and the model's own handles to its layers stay as
// they are (PyTorch swaps in new modules, which C++ handles would not see).
// Returns `module`.
std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<distributed::ProcessGroup> group);

}  // namespace loom::nn
