// File: bench/step_bench.h
// The Loom side of the training-step benchmark: one configuration (model,
// batch, precision, mode) timed the way bench/torch_bench.py times PyTorch,
// the Fashion-MNIST time-to-accuracy run, and the binary's main().
//
//   loom::bench::StepResult r = loom::bench::run_step_config(
//       {.model = "mnist_net", .batch = 128, .precision = "tf32", .mode = "graph"});
//   std::cout << loom::bench::to_json(r) << "\n";
#pragma once

#include <cstdint>
#include <string>

#include <memory>

#include "bench/summary.h"
#include "core/device.h"
#include "distributed/process_group.h"

namespace loom::bench {

struct StepConfig {
  std::string model = "mnist_net";  // a name of the zoo's registry (models/registry.h)
  int64_t batch = 128;
  std::string precision = "tf32";  // tf32, strict, bf16
  std::string mode = "graph";      // graph: optim::TrainStep with CUDA graphs; eager
  std::string layout = "nchw";     // nchw or nhwc (channels-last model and inputs)
  Device device = Device::cuda();
  int steps = 100;  // per timed repeat
  int repeats = 5;
  int warmup = 10;        // untimed steps after the first
  int profile_steps = 0;  // > 0: then profile this many eager steps, print the table
  bool autotune = false;  // cuDNN plans: time the candidates, keep the fastest
  std::string optimizer = "sgd";  // sgd or adam (lr 1e-3)
  std::string plan_build;         // lazy, eager, precompiled; "" keeps the process's mode
  bool eval_forward = false;      // then one evaluation-mode forward (the test pass's plans)
  // A data-parallel job's group: the model trains through DistributedDataParallel
  // on group->device(); null: one process.
  std::shared_ptr<distributed::ProcessGroup> group;
};

// Builds the model (seeded), SGD (lr 0.01, momentum 0.9, weight decay 5e-4; or
// Adam lr 1e-3),
// four resident input sets (x randn, y randint 0..9), runs the first step
// (timed with the wall clock from model construction, synchronised; for the
// process's first configuration from the process start, so that CUDA and cuDNN
// initialisation count), the warm-up, then waits for background (lazy) cuDNN
// plan builds and runs two more untimed steps so that the steady state is timed
// with the specialized plans, then `repeats` runs of `steps` steps timed with
// CUDA events (the steady clock on the CPU). Peak memory counts from an emptied allocator
// cache; cuDNN plans cached by an earlier configuration of the same shapes are
// reused (PyTorch keeps cudnn.benchmark's choices too), so the first step of
// the first mode run for a shape is the one that includes plan building.
StepResult run_step_config(const StepConfig& config);

// Fashion-MNIST (IDX .gz files in `dir`), mnist_net, Adam 1e-3, batch 128,
// tf32, up to 15 epochs, stopping after the first epoch whose test accuracy
// reaches `target`; data loading is inside the timed region.
TtaResult run_time_to_accuracy(const std::string& dir, Device device, double target = 0.91,
                                bool autotune = false);

// bench/train_step's main: flags as bench/options.h. Returns 0, 1 after a
// loom::Error, 2 for bad flags.
int bench_main(int argc, char** argv);

}  // namespace loom::bench
