// File: core/checkpoint.h
// Full training checkpoints (model, optimizer, epoch, step, RNG state) in one
// safetensors file whose data section is guarded by a CRC-32.
//
//   loom::save_checkpoint("run.ckpt", {.model = net.state_dict(),
//                                      .optimizer = opt.state_dict(), .epoch = 3});
//   loom::TrainingCheckpoint resumed = loom::load_checkpoint("run.ckpt");
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
  int64_t epoch = 0;
  int64_t step = 0;                          // optimizer / LR-schedule steps taken
  uint64_t rng_seed = 0, rng_offset = 0;     // Generator::seed() / offset()
  std::map<std::string, std::string> extra = {};  // anything else (hyper-parameters, ...)
};

// One safetensors file: tensors "model.<name>" and "optimizer.<name>", the
// scalars and `extra` in __metadata__, and the CRC-32 of the data section,
// which load_checkpoint verifies (a flipped byte is an IoError), with a second
// CRC-32 over the header so that a corrupt scalar is caught as well. Loading
// range-checks the scalars (epoch 0..2^31-1, step >= 0): an IoError names the
// file and the value.
void save_checkpoint(const std::string& path, const TrainingCheckpoint& checkpoint);
TrainingCheckpoint load_checkpoint(const std::string& path, Device device = Device::cpu());

}  // namespace loom
