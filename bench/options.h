// File: bench/options.h
// The flags of bench/train_step: which configurations to run and how long.
//
//   bench_train_step --models lenet5,mnist_net --batches 128 --precisions tf32
//                    --modes graph,eager --steps 100 --repeats 5 --json loom.jsonl
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace loom::bench {

inline constexpr const char* kUsage =
    "usage: bench_train_step [flags]\n"
    "  --models LIST       lenet5,mnist_net,resnet9 (default), or any model of the zoo's registry\n"
    "                      (models/registry.h: resnet18_cifar, mobilenet_v2_cifar, vit_tiny, ...;\n"
    "                      an unknown name lists them all); 'none' for only --tta\n"
    "  --batches LIST      batch sizes (default 128,512)\n"
    "  --precisions LIST   tf32,strict,bf16 (default all)\n"
    "  --modes LIST        graph-traced,graph,eager (default all three): graph-traced is\n"
    "                      optim::TrainStep as it comes (CUDA-graph replay, fusion by tracing);\n"
    "                      graph and eager: replayed or eager steps without tracing\n"
    "                      (trace_fusion = false), with nn::fuse()d layers; graph-unfused,\n"
    "                      eager-unfused: neither tracing nor nn::fuse\n"
    "  --layout L          auto (channels-last on the GPU, Loom's native layout), nchw, nhwc\n"
    "  --steps S           steps per timed repeat (default 100)\n"
    "  --repeats R         timed repeats; the median is reported (default 5)\n"
    "  --warmup W          untimed steps after the first (default 10)\n"
    "  --json PATH         also write one JSON object per configuration to PATH\n"
    "  --autotune          time cuDNN's candidate plans and keep the fastest (cudnn.benchmark)\n"
    "  --plan-build M      lazy (default; or LOOM_CUDNN_PLAN_BUILD), eager or precompiled: when\n"
    "                      cuDNN plans are built (core/numerics.h)\n"
    "  --eval-forward      after timing, one evaluation-mode forward per configuration (builds\n"
    "                      the test pass's plans; tools/warm_plans.sh)\n"
    "  --plan-timeline F   at the end, write when each cuDNN plan was built, restored or\n"
    "                      swapped in to F, then the plan cache's table (engines, hits)\n"
    "  --profile           after timing, profile eager steps and print the per-layer table\n"
    "  --profile-steps K   eager steps profiled (default 10)\n"
    "  --tta DIR           Fashion-MNIST time to 91% test accuracy from the IDX files in DIR\n"
    "  --device D          cuda or cpu (default cuda when available)\n"
    "  --optimizer O       sgd (lr 0.01, momentum 0.9, weight decay 5e-4; default) or adam\n"
    "                      (lr 1e-3, the trainer's recipe)\n"
    "  --distributed       one rank of a data-parallel job under mpirun: each rank trains on\n"
    "                      its GPU (cuda:<local rank>) through DistributedDataParallel with\n"
    "                      --batches per GPU; rank 0 prints the job's img/s and where one\n"
    "                      eager step's all-reduces ran against the backward\n";

struct BenchOptions {
  std::vector<std::string> models = {"lenet5", "mnist_net", "resnet9"};
  std::vector<int64_t> batches = {128, 512};
  std::vector<std::string> precisions = {"tf32", "strict", "bf16"};
  std::vector<std::string> modes = {"graph-traced", "graph", "eager"};
  std::string layout = "auto";
  int steps = 100;
  int repeats = 5;
  int warmup = 10;
  std::string json;
  bool profile = false;
  int profile_steps = 10;
  // Time cuDNN's candidate plans (PyTorch's cudnn.benchmark). Off: on the H100 it
  // changed no step time measurably and made the first step 20-40 s (each
  // runtime-compiled candidate is compiled to be timed).
  bool autotune = false;
  std::string tta;
  std::string plan_build;     // "" keeps the process's mode (LOOM_CUDNN_PLAN_BUILD, else lazy)
  std::string plan_timeline;  // "" writes none
  bool distributed = false;   // a rank of an mpirun job, DDP over NCCL
  bool eval_forward = false;
  Device device = cuda_available() ? Device::cuda() : Device::cpu();
  std::string optimizer = "sgd";
  bool help = false;
};

// Parses the arguments after the program name. Throws ValueError naming the
// flag and what it accepts for an unknown flag, a missing or bad value, or an
// unknown model, precision, mode, layout, plan-build mode or device.
BenchOptions parse_options(const std::vector<std::string>& args);

// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(const std::string& text);

// A flag's integer value, all of `value`; ValueError naming the flag otherwise.
int64_t parse_int(const std::string& flag, const std::string& value);
// The same, between `minimum` and a billion.
int parse_count(const std::string& flag, const std::string& value, int64_t minimum);

}  // namespace loom::bench
