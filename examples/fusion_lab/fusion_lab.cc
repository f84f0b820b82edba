// File: examples/fusion_lab/fusion_lab.cc
// The fusion lab: tries every candidate fusion on this GPU, in every precision
// and layout, and prints one table (pattern x precision x layout: supported?,
// engine, fused ms, unfused ms, speedup) as Markdown, and as CSV with --csv.
//
//   bazel run //examples/fusion_lab -- [--models [LIST] | --patterns] [--csv FILE] [--iterations N]
//
// --models (the default) takes the candidates from models of the zoo's
// registry (models/registry.h; without a LIST the reference models lenet5,
// mnist_net and resnet9, else e.g. --models resnet20,mobilenet_v2_cifar): each
// fused block a forward of the nn::fuse()d model runs, at the shapes the model
// feeds it. --patterns takes a fixed list: conv2d / linear + bias + each
// activation row, batch norm + residual + relu, and a user chain.
// "supported" means a fused cuDNN graph ran for the block (some piece fused).
// Plans are built eagerly (unless LOOM_CUDNN_PLAN_BUILD is set), so each
// candidate is timed on the plans it keeps, not on lazy stand-ins.
//
// The lab measures cuDNN fusions, so it needs a GPU: without one it says so
// and exits 1 (the CPU runs blocks one op at a time, with nothing to compare).
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/autocast.h"
#include "core/error.h"
#include "core/numerics.h"
#include "core/ops/fusion.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "layers/fused.h"
#include "models/registry.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/fused.h"
#include "core/cudnn/plan_cache.h"
#endif

using namespace loom;

namespace {

constexpr const char* kUsage =
    "usage: fusion_lab [--models [LIST] | --patterns] [--csv FILE] [--iterations N]\n"
    "  LIST: names of models/registry.h, comma-separated (default lenet5,mnist_net,resnet9)\n";

struct Candidate {
  std::string source;  // "mnist_net", "patterns"
  fusion::Block block;
  std::vector<std::optional<Shape>> shapes;  // x, then the operands
};

struct Row {
  std::string pattern, precision, layout, supported, engine;
  double fused_ms = 0, unfused_ms = 0;
};

// Each fused block a forward of a zoo model runs, at the shapes the model feeds
// it (batch 64; 16 for the ImageNet-sized models).
std::vector<Candidate> model_candidates(const std::vector<std::string>& names) {
  std::vector<Candidate> out;
  for (const std::string& name : names) {
    const models::ZooModel& row = models::zoo_model(name);
    fusion::clear_report();
    std::shared_ptr<nn::Module> net = row.build(row.num_classes);
    nn::fuse(*net);
    net->to(Device::cuda());
    (*net)(randn(row.batch_shape(row.dataset == "imagenet" ? 16 : 64)).to(Device::cuda()));
    for (const fusion::BlockReport& r : fusion::block_reports()) out.push_back({name, r.spec, r.shapes});
  }
  fusion::clear_report();
  return out;
}

std::vector<Candidate> pattern_candidates() {
  const Shape x = {64, 64, 32, 32}, w = {64, 64, 3, 3}, k = {64}, rows = {256, 512}, lw = {512, 512}, lk = {512};
  std::vector<Candidate> out;
  for (ActivationKind kind : kernel::kActivationKinds) {
    out.push_back({"patterns", fusion::Block().conv2d({.padding = {1, 1}}).bias().activation(kind), {x, w, k}});
    out.push_back({"patterns", fusion::Block().linear().bias().activation(kind), {rows, lw, lk}});
  }
  out.push_back({"patterns", fusion::Block().batch_norm().add_residual().relu(), {x, k, k, k, k, x}});
  out.push_back({"patterns", fusion::Block().conv2d({.padding = {1, 1}}).scale_bias().gelu(), {x, w, k, k}});
  return out;
}

std::vector<Tensor> make_inputs(const Candidate& c, MemoryFormat format, Generator& gen) {
  const std::vector<std::string> names = c.block.operand_names();
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    if (!c.shapes[i]) {
      out.push_back(Tensor());
      continue;
    }
    const bool variance = i > 0 && names[i - 1].ends_with("running_var");
    Tensor t = variance ? ones(*c.shapes[i]) : randn(*c.shapes[i], {}, &gen) * 0.1;
    t = t.to(Device::cuda());
    if (t.dim() == 4) t = t.contiguous(format);
    const bool buffer = i > 0 && names[i - 1].find("running_") != std::string::npos;
    if (!buffer) t.requires_grad_();
    out.push_back(t);
  }
  return out;
}

#ifdef LOOM_WITH_CUDA
// Plan-cache uses per (graph, engine id; -1 for none): a plan made during a run
// counts 1, each hit 1 more.
using PlanUses = std::map<std::pair<std::string, int64_t>, int64_t>;
PlanUses plan_uses() {
  PlanUses uses;
  for (const cudnn::PlanInfo& info : cudnn::PlanCache::global().entries()) {
    uses[{info.graph, info.supported ? info.notes.engine_id : -1}] += info.hits + 1;
  }
  return uses;
}

// "conv_fprop+add+relu_fwd: engine 7" for each multi-op graph used since `before`.
std::string fused_engines(const PlanUses& before) {
  std::string out;
  for (const auto& [key, uses] : plan_uses()) {
    const auto it = before.find(key);
    if (it != before.end() && it->second >= uses) continue;
    const auto& [graph, engine] = key;
    const std::string ops = graph.substr(0, graph.find(' '));
    if (ops.find('+') == std::string::npos) continue;  // a single op: nothing fused
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", ops,
                       engine < 0 ? std::string("no engine") : fmt::format("engine {}", engine));
  }
  return out;
}

int64_t fused_graph_runs() {
  const cudnn::FusedRuns r = cudnn::fused_runs();
  return r.conv_bias_relu + r.bn_activation_forward + r.bn_activation_backward + r.dgrad_relu + r.matmul_bias_relu +
         r.epilogue;
}
#endif

// One candidate under the current policy and layout.
Row try_candidate(const Candidate& c, MemoryFormat format, int iterations, Generator& gen) {
  Row row;
  row.pattern = c.block.str();
  row.layout = format == MemoryFormat::ChannelsLast ? "nhwc" : "nchw";
  std::vector<Tensor> in = make_inputs(c, format, gen);
  const std::vector<Tensor> operands(in.begin() + 1, in.end());
  fusion::clear_report();
#ifdef LOOM_WITH_CUDA
  const int64_t before = fused_graph_runs();
  const PlanUses uses = plan_uses();
  (void)c.block(in[0], operands);
  row.supported = fused_graph_runs() > before ? "yes" : "no";
  row.engine = fused_engines(uses);
#endif
  for (const fusion::BlockReport& r : fusion::block_reports()) {
    for (size_t i = 0; i < r.pieces.size(); ++i) {
      if (row.supported == "no" && !r.pieces[i].why_not.empty() && row.engine.empty()) {
        row.engine = "none: " + r.pieces[i].why_not;
      }
    }
  }
  const fusion::Timing t = fusion::measure(c.block, in[0], operands, iterations);
  row.fused_ms = t.fused_backward_ms;
  row.unfused_ms = t.unfused_backward_ms;
  return row;
}

std::string csv_field(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

void print(const std::vector<Row>& rows, const std::string& csv_path) {
  std::printf("| pattern | precision | layout | supported | engine | fused ms | unfused ms | speedup |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s | %s | %s | %s | %.3f | %.3f | %.2fx |\n", r.pattern.c_str(), r.precision.c_str(),
                r.layout.c_str(), r.supported.c_str(), r.engine.empty() ? "-" : r.engine.c_str(), r.fused_ms,
                r.unfused_ms, r.unfused_ms / r.fused_ms);
  }
  if (csv_path.empty()) return;
  std::ofstream csv(csv_path);
  csv << "pattern,precision,layout,supported,engine,fused_ms,unfused_ms,speedup\n";
  for (const Row& r : rows) {
    csv << fmt::format("{},{},{},{},{},{:.4f},{:.4f},{:.3f}\n", csv_field(r.pattern), r.precision, r.layout,
                       r.supported, csv_field(r.engine), r.fused_ms, r.unfused_ms, r.unfused_ms / r.fused_ms);
  }
  std::printf("\nCSV written to %s\n", csv_path.c_str());
}

struct Flags {
  bool patterns = false;
  std::vector<std::string> models = {"lenet5", "mnist_net", "resnet9"};
  std::string csv;
  int iterations = 20;
};

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (end > begin) names.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

std::optional<Flags> parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--models") {
      f.patterns = false;
      if (i + 1 < argc && argv[i + 1][0] != '-') f.models = split_names(argv[++i]);
    } else if (a == "--patterns") {
      f.patterns = true;
    } else if (a == "--csv" && i + 1 < argc) {
      f.csv = argv[++i];
    } else if (a == "--iterations" && i + 1 < argc) {
      const std::string text = argv[++i];
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), f.iterations);
      // The whole word must be a number: "5x" is refused, not read as 5.
      if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
      if (f.iterations < 1 || f.iterations > 10000) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Flags> flags = parse(argc, argv);
  if (!flags) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  try {
    for (const std::string& name : flags->models) models::zoo_model(name);
  } catch (const ValueError& e) {  // an unknown name: the message lists the zoo
    std::fprintf(stderr, "fusion_lab: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (!cuda_available()) {
    std::fprintf(stderr,
                 "fusion_lab: no usable CUDA GPU here; the lab measures cuDNN fusions and needs one "
                 "(on the CPU a block runs one op at a time, so there is nothing to compare)\n");
    return 1;
  }
  // Each candidate's first run must meet the plan it keeps (lazy building would
  // run stand-ins and report the fusions a background build has not finished as
  // unsupported); LOOM_CUDNN_PLAN_BUILD, when set, still decides.
  std::optional<PlanBuildGuard> eager;
  if (std::getenv("LOOM_CUDNN_PLAN_BUILD") == nullptr) eager.emplace(PlanBuildMode::Eager);
  try {
    const std::vector<Candidate> candidates =
        flags->patterns ? pattern_candidates() : model_candidates(flags->models);
    struct Setting {
      const char* name;
      Precision precision;
      bool bf16;
    };
    const Setting settings[] = {{"strict_fp32", Precision::StrictFp32, false},
                                {"tf32", Precision::Tf32, false},
                                {"bf16", Precision::Bf16, true}};
    Generator gen(0);
    std::vector<Row> rows;
    for (const Candidate& c : candidates) {
      for (const Setting& s : settings) {
        for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
          NumericsGuard numerics({.precision = s.precision});
          AutocastGuard autocast(s.bf16 ? std::optional<DType>(DType::BFloat16) : std::nullopt);
          Row row = try_candidate(c, format, flags->iterations, gen);
          row.precision = s.name;
          row.pattern = fmt::format("{}: {} @ x {}", c.source, row.pattern, shape_str(*c.shapes[0]));
          rows.push_back(row);
        }
      }
    }
    print(rows, flags->csv);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusion_lab: %s\n", e.what());
    return 1;
  }
}
