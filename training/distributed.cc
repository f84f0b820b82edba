// File: training/distributed.cc
// The trainers' data-parallel mode: joining the job, each rank's config, aborting.
#include "training/distributed.h"

#include <cstdio>

#include "core/error.h"
#include "data/distributed_sampler.h"

namespace loom::training {

std::shared_ptr<distributed::ProcessGroup> join_job(const TrainConfig& config) {
  distributed::ProcessGroupOptions options;
  if (!config.device.is_cuda()) options.device = Device::cpu();
  std::shared_ptr<distributed::ProcessGroup> group = distributed::ProcessGroup::from_mpi(options);
  if (group->rank() == 0 && config.progress) {
    std::printf("distributed: %d ranks (%s), global batch %d x %lld\n", group->size(),
                group->has_nccl() ? "NCCL" : "MPI", group->size(),
                static_cast<long long>(config.batch_size));
  }
  return group;
}

TrainConfig rank_config(const TrainConfig& config, const distributed::ProcessGroup& group) {
  TrainConfig c = config;
  c.device = group.device();
  if (group.rank() != 0) {
    c.progress = false;
    c.metrics.clear();
    c.plot.clear();
    c.save.clear();
    c.export_onnx.clear();
    c.profile_steps = 0;
  }
  return c;
}

data::Dataset epoch_shard(const data::Dataset& train, const TrainConfig& config,
                          const distributed::ProcessGroup& group, int epoch) {
  data::DistributedSampler sampler(train.size(), {.num_replicas = group.size(),
                                                  .rank = group.rank(),
                                                  .seed = config.seed});
  sampler.set_epoch(epoch);
  return data::gather(train, sampler.indices());
}

TrainResult run_or_abort(const distributed::ProcessGroup& group, const std::function<TrainResult()>& train) {
  try {
    return train();
  } catch (const Error& e) {
    std::fprintf(stderr, "\ntrain: rank %d of %d: %s\n", group.rank(), group.size(), e.what());
    std::fflush(stderr);
    group.abort_job(1);
  }
}

}  // namespace loom::training
