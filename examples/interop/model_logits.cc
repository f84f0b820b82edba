// File: examples/interop/model_logits.cc
// Loom's half of the model interop check (tools/model_interop.py): weights move
// between Loom and PyTorch as safetensors state_dicts, and both compute the same
// logits on the same batch.
//
//   model_logits export MODEL DIR   writes DIR/loom_weights.safetensors (Loom's
//                                   initialisation), DIR/batch.safetensors and
//                                   DIR/loom_logits.safetensors
//   model_logits eval MODEL DIR     loads DIR/torch_weights.safetensors and
//                                   DIR/batch.safetensors, writes
//                                   DIR/loom_logits_from_torch.safetensors
//
// Logits are computed in eval mode (batch norm uses its running statistics) on
// the CPU in float32. MODEL: any name of the zoo's registry (models/registry.h),
// at its own input size, batch 2.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/serialize.h"
#include "core/ops/ops.h"
#include "training/user_path.h"
#include "layers/nn.h"
#include "models/registry.h"

namespace {

using namespace loom;

constexpr int64_t kBatch = 2;

std::shared_ptr<nn::Module> model(const std::string& name) {
  const models::ZooModel& row = models::zoo_model(name);
  return row.build(row.num_classes);
}

Tensor logits(nn::Module& net, const Tensor& batch) {
  NoGradGuard no_grad;
  net.eval();
  return net(batch);
}

void export_model(const std::string& name, const std::string& dir) {
  manual_seed(1);
  std::shared_ptr<nn::Module> built = model(name);
  nn::Module& net = *built;
  Generator gen(2);
  // Running statistics that are not the defaults, so eval mode exercises them.
  NoGradGuard no_grad;
  for (auto& [key, buffer] : net.named_buffers()) {
    if (key.ends_with("running_mean")) Tensor(buffer).copy_(mul(randn(buffer.sizes(), {}, &gen), 0.1));
    if (key.ends_with("running_var")) Tensor(buffer).copy_(add(rand(buffer.sizes(), {}, &gen), 0.5));
  }
  Tensor batch = randn(models::zoo_model(name).batch_shape(kBatch), {}, &gen);
  save_safetensors(dir + "/loom_weights.safetensors", net.state_dict());
  save_safetensors(dir + "/batch.safetensors", {{"x", batch}});
  save_safetensors(dir + "/loom_logits.safetensors", {{"logits", logits(net, batch)}});
}

void eval_model(const std::string& name, const std::string& dir) {
  std::shared_ptr<nn::Module> built = model(name);
  nn::Module& net = *built;
  net.load_state_dict(load_safetensors(dir + "/torch_weights.safetensors"));
  StateDict batch_file = load_safetensors(dir + "/batch.safetensors");
  LOOM_CHECK(!batch_file.empty(), IoError, "[model_logits] {}/batch.safetensors holds no tensor; "
             "run 'model_logits export' first", dir);
  Tensor batch = batch_file.front().second;
  save_safetensors(dir + "/loom_logits_from_torch.safetensors", {{"logits", logits(net, batch)}});
}

}  // namespace

// Nothing escapes main: usage errors exit 2, failures 1.
int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: model_logits export|eval MODEL DIR\n";
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc != 4) {
    std::fprintf(stderr, "model_logits: expected 3 arguments, got %d\n%s", argc - 1, kUsage);
    return 2;
  }
  const std::string command = argv[1], name = argv[2], dir = training::user_path(argv[3]);
  if (command != "export" && command != "eval") {
    std::fprintf(stderr, "model_logits: unknown command '%s' (export or eval)\n%s", command.c_str(), kUsage);
    return 2;
  }
  try {
    if (command == "export") export_model(name, dir);
    else eval_model(name, dir);
  } catch (const Error& e) {
    std::fprintf(stderr, "model_logits: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_logits: internal error: %s (a bug in Loom: please report it)\n", e.what());
    return 1;
  }
  return 0;
}
