// File: tools/saved_memory.cc
// Prints what one training step of a zoo model keeps alive between its forward
// and its backward: the saved tensors' bytes per op (core/autograd_memory.h).
// The Loom half of tools/saved_memory_torch.py, which sums PyTorch's saved
// tensors for the twin at the same batch; runs on the CPU or a GPU.
//
//   saved_memory --model resnet9 --batch 8                     # CPU, float32, NCHW
//   saved_memory --model vgg11_bn --batch 32 --device cuda --bf16 --channels-last --fuse
//
// --fuse runs nn::fuse on the model first, as bench/train_step does (its modes
// without "-unfused"), so the fused ops' saved tensors are the ones counted.
// --trace runs the forward through fusion::Traced (as the bench's graph-traced
// mode does through TrainStep): one untimed forward records the chains, and the
// counted one runs them as blocks.
#include <fmt/format.h>

#include <iostream>
#include <string>

#include "core/autocast.h"
#include "core/autograd_memory.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/loss.h"
#include "core/storage_stats.h"
#include "core/tensor.h"
#include "layers/fused.h"
#include "models/registry.h"

namespace {

using loom::Tensor;
using loom::ValueError;

struct Args {
  std::string model = "resnet9", device = "cpu";
  int64_t batch = 8;
  bool bf16 = false, channels_last = false, fuse = false, trace = false;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      LOOM_CHECK(i + 1 < argc, ValueError, "[saved_memory] {} needs a value", flag);
      return argv[++i];
    };
    if (flag == "--model") args.model = value();
    else if (flag == "--batch") args.batch = std::stoll(value());
    else if (flag == "--device") args.device = value();
    else if (flag == "--bf16") args.bf16 = true;
    else if (flag == "--channels-last") args.channels_last = true;
    else if (flag == "--fuse") args.fuse = true;
    else if (flag == "--trace") args.trace = true;
    else throw ValueError(fmt::format("[saved_memory] unknown flag {}; flags: --model NAME --batch N "
                                      "--device cpu|cuda[:i] --bf16 --channels-last --fuse --trace", flag));
  }
  LOOM_CHECK(args.batch > 0, ValueError, "[saved_memory] --batch must be positive, got {}", args.batch);
  return args;
}

double mib(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int run(const Args& args) {
  const loom::models::ZooModel& row = loom::models::zoo_model(args.model);
  const loom::Device device = loom::Device::parse(args.device);
  const loom::MemoryFormat format =
      args.channels_last ? loom::MemoryFormat::ChannelsLast : loom::MemoryFormat::Contiguous;
  std::shared_ptr<loom::nn::Module> net = row.build(row.num_classes);
  net->to(device);
  net->to(format);
  if (args.fuse) loom::nn::fuse(*net);
  loom::Generator gen(0);
  Tensor x = loom::randn(row.batch_shape(args.batch), {.device = device}, &gen).contiguous(format);
  Tensor target = loom::zeros(row.target_shape(args.batch), {.dtype = loom::DType::Int64, .device = device});
  loom::fusion::Traced traced([&](const Tensor& input) { return (*net)(input); });
  std::optional<loom::DType> autocast;
  if (args.bf16) autocast = loom::DType::BFloat16;
  if (args.trace) {  // the recording forward, whose saved tensors are dropped with its output
    loom::AutocastGuard guard(autocast);
    traced(x);
  }
  const size_t before = loom::storage_bytes_in_use(device.type);
  Tensor loss;
  {
    loom::AutocastGuard guard(autocast);
    loss = loom::cross_entropy(args.trace ? traced(x) : (*net)(x), target);
  }
  const size_t held = loom::storage_bytes_in_use(device.type) - before;
  const std::vector<loom::SavedTensorBytes> rows = loom::release_saved_tensors(loss);
  fmt::print("{} batch {} on {}{}{}{}{}: saved tensors per op (MiB)\n", row.name, args.batch, device.str(),
             args.bf16 ? ", bf16 autocast" : "", args.channels_last ? ", channels-last" : "",
             args.fuse ? ", fused" : "", args.trace ? ", traced" : "");
  for (const loom::SavedTensorBytes& r : rows) {
    if (r.bytes == 0) continue;
    fmt::print("  {:<32} {:>4} nodes {:>10.2f}\n", r.op, r.nodes, mib(r.bytes));
  }
  fmt::print("  {:<32} {:>16.2f}\n", "total", mib(loom::total_bytes(rows)));
  fmt::print("  {:<32} {:>16.2f}\n", "held after the forward", mib(held));
  if (args.trace) fmt::print("{}", traced.plan().str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const ValueError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
