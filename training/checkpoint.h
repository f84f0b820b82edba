// File: training/checkpoint.h
// The trainer's checkpoints (core/checkpoint.h's TrainingCheckpoint, written
// atomically): the model, the optimizer's state with the schedule's beside it
// ("schedule." names), the epochs done, the generator's state and the flags
// that decide what the run computes ("flag." names), which a resume compares
// with its own. Private to the trainer (training/loop.cc).
#pragma once

#include <string>
#include <vector>

#include "layers/module.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
#include "training/config.h"

namespace loom::training {

// A bad --save fails now (IoError), not after the first epoch's work.
void check_save(const TrainConfig& c);

// Writes c.save after `epochs_done` epochs.
void save_training(const TrainConfig& c, const nn::Module& net, const optim::Optimizer& opt,
                   const optim::LRScheduler* schedule, int epochs_done);

// Loads c.resume into the model, optimizer, schedule and default generator and
// returns the epochs it had done; each flag that differs from the
// checkpoint's run is printed and added to `warnings`.
int resume_training(const TrainConfig& c, nn::Module& net, optim::Optimizer& opt, optim::LRScheduler* schedule,
                    std::vector<std::string>& warnings);

}  // namespace loom::training
