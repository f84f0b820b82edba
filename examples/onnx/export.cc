// File: examples/onnx/export.cc
// The export tool: a registry model's checkpoint as an ONNX model, or every
// registry model with the inputs and Loom's outputs that tools/onnx_check.py
// compares ONNX Runtime's against.
//
//   export --model resnet20 --checkpoint run.ckpt --out resnet20.onnx
//   export --zoo DIR [--models a,b] [--max-mb N]
//
// --zoo writes, per model, DIR/<model>.onnx, DIR/<model>.inputs.safetensors
// (the example batch, under the graph input's name) and
// DIR/<model>.outputs.safetensors (Loom's CPU outputs in evaluation mode,
// under the graph output's name), from the builder's weights with running
// statistics drawn away from their defaults so that batch norm matters.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "core/serialize.h"
#include "models/registry.h"
#include "onnx/zoo.h"
#include "training/user_path.h"

namespace {

using namespace loom;

constexpr const char* kUsage =
    "usage: export --model NAME [--checkpoint FILE] [--out FILE] [--batch N] [--max-image-size N]\n"
    "              [--fixed-batch] [--fold-bn]\n"
    "       export --zoo DIR [--models NAME,NAME,...] [--max-mb N] [--batch N] [--max-image-size N]\n"
    "              [--fixed-batch] [--fold-bn]\n"
    "  --model        a model of the zoo's registry\n"
    "  --checkpoint   its weights: a trainer checkpoint (--save) or a safetensors state_dict\n"
    "                 (default: the builder's initial weights)\n"
    "  --out          the ONNX file (default NAME.onnx)\n"
    "  --batch        the example batch the forward is traced on (default 1; --zoo: 2)\n"
    "  --max-image-size  trace larger images at N x N (default: each model's own size); the\n"
    "                 ImageNet models' pools are adaptive, and the file takes N x N images\n"
    "  --fixed-batch  a fixed batch size instead of the symbolic 'batch'\n"
    "  --fold-bn      fold each batch norm into the convolution before it (--zoo: as well, in\n"
    "                 <model>.fold_bn.onnx, compared against the same outputs)\n"
    "  --zoo          every registry model (or --models) into DIR with inputs and Loom's outputs\n"
    "  --max-mb       --zoo: skip models whose weights exceed N MB\n";

struct Flags {
  std::map<std::string, std::string> values;
  bool fixed_batch = false, fold_bn = false;
};

// --flag value and --flag=value; ValueError for anything else.
Flags parse(int argc, char** argv) {
  Flags f;
  const std::vector<std::string> valued = {"--model", "--checkpoint", "--out", "--batch", "--max-image-size",
                                           "--zoo", "--models", "--max-mb"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--fixed-batch") f.fixed_batch = true;
    else if (arg == "--fold-bn") f.fold_bn = true;
    else {
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      }
      LOOM_CHECK(std::find(valued.begin(), valued.end(), arg) != valued.end(), ValueError, "unknown flag '{}'", arg);
      LOOM_CHECK(!value.empty(), ValueError, "{} needs a value", arg);
      f.values[arg] = value;
    }
  }
  LOOM_CHECK(f.values.count("--model") + f.values.count("--zoo") == 1, ValueError,
             "give exactly one of --model NAME and --zoo DIR");
  return f;
}

int64_t positive(const Flags& f, const std::string& flag, int64_t fallback) {
  auto it = f.values.find(flag);
  if (it == f.values.end()) return fallback;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LOOM_CHECK(used == it->second.size() && v >= 1, ValueError, "{} needs a whole number >= 1, got '{}'", flag,
             it->second);
  return v;
}

// The example batch and export options of the flags (`fold`: this export folds batch norm).
onnx::ZooExportOptions zoo_options(const Flags& f, int64_t default_batch, bool fold) {
  return {.batch = positive(f, "--batch", default_batch),
          .max_image_size = f.values.count("--max-image-size") ? positive(f, "--max-image-size", 1) : 0,
          .seed = 3,
          .onnx = {.dynamic_batch = !f.fixed_batch, .fold_batch_norm = fold}};
}

void print_summary(const std::string& name, const std::string& path, const onnx::ExportSummary& s) {
  std::printf("%-20s %s: %lld nodes, %lld initializers, %.1f MB\n", name.c_str(), path.c_str(),
              static_cast<long long>(s.nodes), static_cast<long long>(s.initializers),
              static_cast<double>(s.file_bytes) / 1e6);
}

void export_one(const Flags& f) {
  const std::string name = f.values.at("--model");
  const std::string out = training::user_path(f.values.count("--out") ? f.values.at("--out") : name + ".onnx");
  StateDict weights;
  if (f.values.count("--checkpoint")) weights = onnx::load_weights(training::user_path(f.values.at("--checkpoint")));
  onnx::ZooExport e = onnx::export_zoo_model(name, weights, out, zoo_options(f, 1, f.fold_bn));
  print_summary(name, out, e.summary);
}

// The builder's weights with running statistics away from 0 and 1.
StateDict zoo_weights(const models::ZooModel& row) {
  manual_seed(1);
  std::shared_ptr<nn::Module> net = row.build(row.num_classes);
  Generator gen(2);
  NoGradGuard no_grad;
  for (auto& [key, buffer] : net->named_buffers()) {
    if (key.ends_with("running_mean")) Tensor(buffer).copy_(mul(randn(buffer.sizes(), {}, &gen), 0.1));
    if (key.ends_with("running_var")) Tensor(buffer).copy_(add(rand(buffer.sizes(), {}, &gen), 0.5));
  }
  return net->state_dict();
}

std::vector<std::string> zoo_selection(const Flags& f) {
  if (!f.values.count("--models")) return models::zoo_names();
  std::vector<std::string> names;
  std::stringstream list(f.values.at("--models"));
  for (std::string name; std::getline(list, name, ',');) names.push_back(models::zoo_model(name).name);
  return names;
}

void export_zoo(const Flags& f) {
  const std::filesystem::path dir = training::user_path(f.values.at("--zoo"));
  std::filesystem::create_directories(dir);
  const double max_mb = static_cast<double>(positive(f, "--max-mb", int64_t{1} << 40));
  for (const std::string& name : zoo_selection(f)) {
    const models::ZooModel& row = models::zoo_model(name);
    const StateDict weights = zoo_weights(row);
    double mb = 0;
    for (const auto& [key, t] : weights) mb += static_cast<double>(t.numel() * element_size(t.dtype())) / 1e6;
    if (mb > max_mb) {
      std::printf("%-20s skipped: %.1f MB of weights > --max-mb %.0f\n", name.c_str(), mb, max_mb);
      continue;
    }
    const std::string path = (dir / (name + ".onnx")).string();
    onnx::ZooExport e = onnx::export_zoo_model(name, weights, path, zoo_options(f, 2, false));
    NoGradGuard no_grad;
    const Tensor y = (*e.model)(e.input);
    save_safetensors((dir / (name + ".inputs.safetensors")).string(), {{e.summary.input_names.at(0), e.input}});
    save_safetensors((dir / (name + ".outputs.safetensors")).string(), {{e.summary.output_names.at(0), y}});
    print_summary(name, path, e.summary);
    if (f.fold_bn) {
      const std::string folded = (dir / (name + ".fold_bn.onnx")).string();
      print_summary(name, folded, onnx::export_zoo_model(name, weights, folded, zoo_options(f, 2, true)).summary);
    }
    std::fflush(stdout);
  }
}

}  // namespace

// Nothing escapes main: usage errors exit 2, failures 1.
int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Flags flags;
  try {
    flags = parse(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "export: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    if (flags.values.count("--zoo")) export_zoo(flags);
    else export_one(flags);
  } catch (const Error& e) {
    std::fprintf(stderr, "export: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export: internal error: %s (a bug in Loom: please report it)\n", e.what());
    return 1;
  }
  return 0;
}
