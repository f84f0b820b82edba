// File: core/checkpoint.h
// Full training checkpoints (model, optimizer, LR schedule, epoch, step, RNG
// state) in one safetensors file whose data section is guarded by a CRC-32.
//
//   loom::save_checkpoint("run.ckpt", {.model = net.state_dict(),
//                                      .optimizer = opt.state_dict(),
//                                      .scheduler = schedule.state_dict(), .epoch = 3});
//   loom::TrainingCheckpoint resumed = loom::load_checkpoint("run.ckpt");
//   schedule.load_state_dict(resumed.scheduler);  // the LR curve goes on where it stopped
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"
#include "core/state_dict.h"

namespace loom {

// Everything needed to resume training bit-identically.
struct TrainingCheckpoint {
  StateDict model = {};      // the model's state_dict (PyTorch names)
  StateDict optimizer = {};  // the optimizer's state tensors
  StateDict scheduler = {};  // the LR schedule's state_dict (optim::LRScheduler), or none
  int64_t epoch = 0;
  int64_t step = 0;                          // optimizer / LR-schedule steps taken
  uint64_t rng_seed = 0, rng_offset = 0;     // Generator::seed() / offset()
  std::map<std::string, std::string> extra = {};  // anything else (hyper-parameters, ...)
};

// One safetensors file: tensors "model.<name>", "optimizer.<name>" and
// "scheduler.<name>", the scalars and `extra` in __metadata__, and the CRC-32 of the data section,
// which load_checkpoint verifies (a flipped byte is an IoError), with a second
// CRC-32 over the header so that a corrupt scalar is caught as well. Loading
// range-checks the scalars (epoch 0..2^31-1, step >= 0): an IoError names the
// file and the value. Files of format 1 (before the scheduler had its slot)
// load too: the trainer kept the schedule's state among the optimizer's
// tensors as "schedule.<name>", and it comes back in `scheduler`.
void save_checkpoint(const std::string& path, const TrainingCheckpoint& checkpoint);
TrainingCheckpoint load_checkpoint(const std::string& path, Device device = Device::cpu());

}  // namespace loom
