// File: fuzz/checkpoint_fuzzer.cc
// Training checkpoints and the states they carry. Byte 0 even: the rest is a
// checkpoint file (safetensors plus CRCs and range-checked scalars). Odd: the
// rest is a safetensors file of optimizer and schedule state, loaded as a
// resume loads it (the CRCs would stop any mutation before it got there):
// tensors named "schedule.<name>" go to a StepLR as <name>, the others to an
// optimizer (bit 1: Adam, else SGD with momentum) over parameters of shapes
// (3) and (2, 2).
#include <string_view>

#include "core/error.h"
#include "core/serialize.h"
#include "core/tensor.h"
#include "fuzz/fuzz_input.h"
#include "optim/adam.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"

namespace {

constexpr std::string_view kSchedulePrefix = "schedule.";

void load_states(const loom::StateDict& tensors, bool adam) {
  loom::StateDict optimizer_state, schedule_state;
  for (const auto& [name, value] : tensors) {
    if (name.starts_with(kSchedulePrefix)) {
      schedule_state.emplace_back(name.substr(kSchedulePrefix.size()), value);
    } else {
      optimizer_state.emplace_back(name, value);
    }
  }
  std::vector<loom::Tensor> params = {loom::zeros({3}, {.requires_grad = true}),
                                      loom::zeros({2, 2}, {.requires_grad = true})};
  loom::optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  loom::optim::Adam adam_opt(params, {.lr = 0.1});
  loom::optim::Optimizer& opt = adam ? static_cast<loom::optim::Optimizer&>(adam_opt) : sgd;
  try {
    opt.load_state_dict(optimizer_state);
  } catch (const loom::Error&) {
  }
  loom::optim::StepLR schedule(opt, 2);
  try {
    schedule.load_state_dict(schedule_state);
  } catch (const loom::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  loom::fuzz::MemoryFile file({data + 1, size - 1});
  try {
    if ((data[0] & 1) == 0) {
      loom::load_checkpoint(file.path());
    } else {
      load_states(loom::load_safetensors(file.path()), data[0] & 2);
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
