// File: training/config.cc
// The precision scope and the run's flags as text (the checkpoint's and the
// metrics file's record of what a run computes).
#include "training/config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace loom::training {

namespace {

NumericsPolicy policy_of(const std::string& name, bool autotune) {
  LOOM_CHECK(name == "tf32" || name == "strict" || name == "bf16", ValueError,
             "[train] unknown precision '{}' (tf32, strict or bf16)", name);
  const Precision precision = name == "strict" ? Precision::StrictFp32
                              : name == "bf16" ? Precision::Bf16
                                               : Precision::Tf32;
  return {.precision = precision, .autotune = autotune};
}

// bf16 mixed precision is autocast on the GPU; the CPU computes in fp32.
std::optional<DType> autocast_of(const std::string& name, Device device) {
  if (name == "bf16" && device.is_cuda()) return DType::BFloat16;
  return std::nullopt;
}

}  // namespace

PrecisionScope::PrecisionScope(const std::string& precision, Device device, bool autotune)
    : numerics_(policy_of(precision, autotune)), autocast_(autocast_of(precision, device)) {}

std::vector<std::pair<std::string, std::string>> run_flags(const TrainConfig& c) {
  return {{"--data", c.synthetic_images > 0 ? std::string() : c.data},
          {"--synthetic", std::to_string(c.synthetic_images)},
          {"--model", c.model},
          {"--epochs", std::to_string(c.epochs)},
          {"--batch-size", std::to_string(c.batch_size)},
          {"--optimizer", c.optimizer},
          {"--lr", fmt::format("{}", c.lr)},
          {"--weight-decay", fmt::format("{}", c.weight_decay)},
          {"--label-smoothing", fmt::format("{}", c.label_smoothing)},
          {"--schedule", c.schedule},
          {"--precision", c.precision},
          {"--seed", std::to_string(c.seed)},
          {"--limit", std::to_string(c.limit)},
          {"dataset", c.dataset}};
}

// The precision that runs: the CPU has neither TF32 nor bf16 autocast, so
// every name computes in IEEE fp32 there.
std::string precision_shown(const TrainConfig& c) {
  if (c.device.is_cuda()) return c.precision;
  return c.precision == "strict" ? "fp32" : fmt::format("fp32 (the CPU has no {})", c.precision);
}

// The flags that decide what the run computes, and the device, as a command
// line: the metrics file's flags column.
std::string flags_text(const TrainConfig& c) {
  std::string text;
  for (const auto& [flag, value] : run_flags(c)) {
    if (!flag.starts_with("--") || value.empty()) continue;  // "dataset" is the program's; no --data under --synthetic
    text += fmt::format("{}{} {}", text.empty() ? "" : " ", flag, value);
  }
  return text + " --device " + c.device.str();
}

}  // namespace loom::training
