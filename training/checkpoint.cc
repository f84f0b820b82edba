// File: training/checkpoint.cc
// Saving and resuming a training run.
#include "training/checkpoint.h"

#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "core/checkpoint.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/serialize.h"
#include "core/utf8.h"

namespace loom::training {

namespace {

constexpr const char* kFlagPrefix = "flag.";

// One warning per flag that differs from the checkpoint's run.
std::vector<std::string> changed_flags(const TrainConfig& c, const TrainingCheckpoint& ckpt) {
  std::vector<std::string> warnings;
  for (const auto& [flag, now] : run_flags(c)) {
    auto found = ckpt.extra.find(kFlagPrefix + flag);
    if (found == ckpt.extra.end() || found->second == now) continue;
    // Text from the file: shown escaped where it would not print as itself.
    const std::string saved = printable(found->second);
    // The optimizer's state_dict carries its hyper-parameters, so for these
    // the checkpoint wins; saying otherwise would mislead.
    if (flag == "--lr" || flag == "--weight-decay") {
      warnings.push_back(fmt::format(
          "{} was '{}' in the run that wrote {} and is '{}' now: training goes on with the "
          "checkpoint's value '{}' (the optimizer state carries it)",
          flag, saved, c.resume, now, saved));
      continue;
    }
    warnings.push_back(fmt::format(
        "{} was '{}' in the run that wrote {} and is '{}' now: the command line's value wins (the "
        "weights, optimizer state and schedule position come from the checkpoint), so the result "
        "differs from a run with these flags from the start",
        flag, saved, c.resume, now));
  }
  return warnings;
}

}  // namespace

int resume_training(const TrainConfig& c, nn::Module& net, optim::Optimizer& opt, optim::LRScheduler* schedule,
                    std::vector<std::string>& warnings) {
  TrainingCheckpoint ckpt = load_checkpoint(c.resume, c.device);
  for (std::string& warning : changed_flags(c, ckpt)) {
    std::fprintf(stderr, "train: warning: %s\n", warning.c_str());
    warnings.push_back(std::move(warning));
  }
  // An error names the checkpoint, which is what is wrong (a CRC-valid file
  // whose optimizer step is 1e30 used to fail later as "the loss was not finite").
  try {
    net.load_state_dict(ckpt.model);
    opt.load_state_dict(ckpt.optimizer);
    if (schedule) schedule->load_state_dict(ckpt.scheduler);
  } catch (const Error& e) {
    throw IoError(fmt::format("[train] --resume {}: the checkpoint does not fit this run: {}",
                              c.resume, e.what()));
  }
  default_generator().set_state(ckpt.rng_seed, ckpt.rng_offset);
  return static_cast<int>(ckpt.epoch);
}

void save_training(const TrainConfig& c, const nn::Module& net, const optim::Optimizer& opt,
                   const optim::LRScheduler* schedule, int epochs_done) {
  TrainingCheckpoint ckpt{.model = net.state_dict(),
                          .optimizer = opt.state_dict(),
                          .scheduler = schedule ? schedule->state_dict() : StateDict{},
                          .epoch = epochs_done,
                          .rng_seed = default_generator().seed(),
                          .rng_offset = default_generator().offset()};
  for (const auto& [flag, value] : run_flags(c)) ckpt.extra[kFlagPrefix + flag] = value;
  save_checkpoint(c.save, ckpt);
}

void check_save(const TrainConfig& c) {
  for (const auto& [flag, path] : {std::pair{"--save", c.save}, std::pair{"--export-onnx", c.export_onnx}}) {
    if (path.empty()) continue;
    try {
      check_save_path(path);
    } catch (const IoError& e) {
      throw IoError(fmt::format("[train] {} {} cannot be written (checked before training): {}", flag, path,
                                e.what()));
    }
  }
}

}  // namespace loom::training
