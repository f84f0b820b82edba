// File: examples/tutorials/checkpoints_and_interop.cc
// docs/checkpoints_and_interop.md: weights as safetensors (the file PyTorch's
// safetensors.torch reads), and a training checkpoint that resumes a run
// bit for bit: it trains 6 steps straight, then 3 steps, saves, loads into a
// fresh model, optimizer and LR schedule and trains 3 more, and compares the two.
//
//   bazel run //examples/tutorials:checkpoints_and_interop -- SCRATCH_DIR
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "core/ops/ops.h"
#include "core/serialize.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "optim/scheduler.h"

using namespace loom;

// The same small classifier every time: its initial weights come from seed 1.
nn::Sequential make_net() {
  Generator init(1);
  return nn::Sequential(nn::Linear(4, 8, {.generator = &init}), nn::ReLU(),
                        nn::Linear(8, 3, {.generator = &init}));
}

void train(nn::Sequential& net, optim::Adam& opt, optim::LRScheduler& schedule, int steps) {
  Generator gen(7);
  Tensor x = randn({16, 4}, {}, &gen);
  Tensor y = randint(0, 3, {16}, {.dtype = DType::Int64}, &gen);
  for (int i = 0; i < steps; ++i) {
    Tensor loss = cross_entropy(net(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    schedule.step();  // lr halves every 2 steps
  }
}

bool same_weights(const nn::Sequential& a, const nn::Sequential& b) {
  StateDict sa = a.state_dict(), sb = b.state_dict();  // same model: same names, same order
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].second.to_vector<float>() != sb[i].second.to_vector<float>()) return false;
  }
  return true;
}

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::fprintf(stderr, "usage: checkpoints_and_interop SCRATCH_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];

  // Weights only: state_dict() names are PyTorch's ("0.weight", "2.bias").
  nn::Sequential net = make_net();
  save_safetensors(dir + "/net.safetensors", net.state_dict(), {{"model", "tutorial"}});
  nn::Sequential copy = make_net();
  copy.load_state_dict(load_safetensors(dir + "/net.safetensors"));
  for (const auto& [name, tensor] : load_safetensors(dir + "/net.safetensors")) {
    std::printf("%s %s\n", name.c_str(), shape_str(tensor.sizes()).c_str());
  }

  // A whole run in one go ...
  nn::Sequential straight = make_net();
  optim::Adam straight_opt(straight.parameters(), {.lr = 0.01});
  optim::StepLR straight_schedule(straight_opt, /*step_size=*/2, /*gamma=*/0.5);
  train(straight, straight_opt, straight_schedule, 6);

  // ... and the same run stopped after 3 steps, saved, loaded and resumed.
  nn::Sequential first = make_net();
  optim::Adam first_opt(first.parameters(), {.lr = 0.01});
  optim::StepLR first_schedule(first_opt, 2, 0.5);
  train(first, first_opt, first_schedule, 3);
  save_checkpoint(dir + "/run.ckpt", {.model = first.state_dict(),
                                      .optimizer = first_opt.state_dict(),
                                      .scheduler = first_schedule.state_dict(),
                                      .step = 3,
                                      .extra = {{"lr", "0.01"}}});

  TrainingCheckpoint checkpoint = load_checkpoint(dir + "/run.ckpt");
  nn::Sequential resumed = make_net();
  resumed.load_state_dict(checkpoint.model);
  optim::Adam resumed_opt(resumed.parameters(), {.lr = std::stod(checkpoint.extra.at("lr"))});
  resumed_opt.load_state_dict(checkpoint.optimizer);
  optim::StepLR resumed_schedule(resumed_opt, 2, 0.5);
  resumed_schedule.load_state_dict(checkpoint.scheduler);  // step 3: lr 0.005, halving at 4
  train(resumed, resumed_opt, resumed_schedule, 3);

  std::printf("safetensors round trip: %s\n", same_weights(net, copy) ? "identical" : "DIFFERENT");
  std::printf("resumed at step %lld: %s to the uninterrupted run\n",
              static_cast<long long>(checkpoint.step),
              same_weights(straight, resumed) ? "identical" : "DIFFERENT");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "checkpoints_and_interop: %s\n", e.what());
  return 1;
}
