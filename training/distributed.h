// File: training/distributed.h
// The trainers' data-parallel mode (--distributed): one rank per GPU under
// mpirun, each training on its DistributedSampler shard of every epoch with
// the per-rank batch size, so the global batch is ranks x batch. Rank 0 alone
// prints progress and writes metrics and checkpoints; checkpoints hold the one
// replicated model, so a run resumes with any number of ranks.
//
//   mpirun -np 2 bazel-bin/examples/mnist/train --distributed --batch-size 128
#pragma once

#include <functional>
#include <memory>

#include "data/dataset.h"
#include "distributed/ddp.h"
#include "distributed/process_group.h"
#include "training/trainer.h"

namespace loom::training {

// Joins the MPI job: an NCCL group on cuda:<local rank> when config.device is
// CUDA, an MPI group on the CPU otherwise.
std::shared_ptr<distributed::ProcessGroup> join_job(const TrainConfig& config);

// This rank's config: its GPU, and on ranks other than 0 no progress,
// metrics or checkpoint writes.
TrainConfig rank_config(const TrainConfig& config, const distributed::ProcessGroup& group);

// This rank's samples of `epoch` (shuffled as config.seed and the epoch say;
// the last incomplete round padded, as PyTorch's DistributedSampler).
data::Dataset epoch_shard(const data::Dataset& train, const TrainConfig& config,
                          const distributed::ProcessGroup& group, int epoch);

// Runs `train`; a loom::Error on this rank is printed and ends every rank
// (MPI_Abort) at once, instead of leaving the others to time out.
TrainResult run_or_abort(const distributed::ProcessGroup& group, const std::function<TrainResult()>& train);

}  // namespace loom::training
