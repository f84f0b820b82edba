// File: core/ops/fusion_report.cc
// The registry of block runs, the timing of a block fused vs unfused, and the
// report text. Engine details come from the plan cache, matched by the graph's
// pattern.
#include "core/ops/fusion_report.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>

#include "core/cuda/capture.h"
#include "core/generator.h"
#include "core/ops/fused.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/reduction.h"
#include "core/step_boundary.h"

namespace loom::fusion {

namespace {

// Enough of a tensor to make another like it.
struct Recipe {
  bool defined = false;
  Shape sizes;
  TensorOptions options;
};

Recipe recipe_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {.defined = true,
          .sizes = t.sizes(),
          .options = {.dtype = t.dtype(), .device = t.device(),
                      .memory_format = t.suggest_memory_format(), .requires_grad = t.requires_grad()}};
}

std::string describe(const Tensor& t) {
  const bool nhwc = t.dim() == 4 && t.suggest_memory_format() == MemoryFormat::ChannelsLast;
  return fmt::format("{}{} {}", shape_str(t.sizes()), nhwc ? " nhwc" : "", dtype_name(t.dtype()));
}

struct Recorded {
  Block block;
  std::string input;
  Recipe x;
  std::vector<Recipe> operands;
  int64_t runs = 0;
  std::vector<PieceRun> pieces;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Recorded> runs;  // by block and input
};

Registry& registry() {
  static Registry r;
  return r;
}

// Random values; a running variance gets ones (it must be positive).
Tensor make(const Recipe& r, const std::string& name, Generator& gen) {
  if (!r.defined) return Tensor();
  TensorOptions o = r.options;
  o.requires_grad = false;
  Tensor t = name.ends_with("running_var") ? ones(r.sizes, o) : randn(r.sizes, o, &gen);
  if (r.options.requires_grad) t.requires_grad_(true);
  return t;
}

void synchronize_device(const Tensor& t) {
  DeviceGuard guard(t.device());
  if (t.device().is_cuda()) cuda::synchronize();
}

// Milliseconds per call of `run`, after one warm-up call.
template <class Run>
double time_ms(const Tensor& like, int iterations, Run run) {
  run();
  synchronize_device(like);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) run();
  synchronize_device(like);
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
  return took.count() / iterations;
}

}  // namespace

std::string run_key(const Block& block, const Tensor& x) { return block.str() + " @ " + describe(x); }

void note_block_run(const Block& block, const Tensor& x, const std::vector<Tensor>& operands,
                    std::vector<PieceRun> pieces) {
  const std::string input = describe(x);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  Recorded& entry = r.runs[run_key(block, x)];
  if (entry.runs == 0) {
    entry.block = block;
    entry.input = input;
    entry.x = recipe_of(x);
    for (const Tensor& t : operands) entry.operands.push_back(recipe_of(t));
  }
  ++entry.runs;
  // A forward without a backward (an eval pass, a timing run) keeps the last
  // backward's note for each piece that ran the same way again.
  for (size_t i = 0; i < pieces.size() && i < entry.pieces.size(); ++i) {
    const PieceRun& last = entry.pieces[i];
    if (pieces[i].backward.empty() && pieces[i].piece == last.piece && pieces[i].how == last.how) {
      pieces[i].backward = last.backward;
    }
  }
  entry.pieces = std::move(pieces);
}

// A backward runs after its forward filed the run; a run cleared in between is not noted.
void note_backward(const std::string& run_key, size_t piece, std::string how) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.runs.find(run_key);
  if (it == r.runs.end() || piece >= it->second.pieces.size()) return;
  it->second.pieces[piece].backward = std::move(how);
}

Timing measure(const Block& block, const Tensor& x, const std::vector<Tensor>& operands, int iterations) {
  Timing t;
  auto forward = [&] { return block(x, operands); };
  for (bool fused : {true, false}) {
    FusionGuard guard(fused);
    Tensor dy;  // per path: made once outside the timed loop, in the dtype this path outputs
    auto backward = [&] {
      Tensor y = block(x, operands);
      if (!dy.defined()) dy = ones_like(y);
      if (y.requires_grad()) y.backward(dy);
    };
    const double f = time_ms(x, iterations, [&] { (void)forward(); });
    const double b = time_ms(x, iterations, backward);
    (fused ? t.fused_forward_ms : t.unfused_forward_ms) = f;
    (fused ? t.fused_backward_ms : t.unfused_backward_ms) = b;
  }
  return t;
}

std::vector<BlockReport> block_reports(ReportOptions options) {
  if (options.measure) {  // time the plans lazy building ends at, not their stand-ins
    wait_for_background_plans();
    step_boundary();
  }
  std::vector<Recorded> recorded;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [key, entry] : r.runs) recorded.push_back(entry);
  }
  std::vector<BlockReport> out;
  Generator gen(0);
  for (const Recorded& e : recorded) {
    BlockReport rep;
    rep.spec = e.block;
    rep.block = e.block.str();
    rep.input = e.input;
    rep.runs = e.runs;
    rep.pieces = e.pieces;
    rep.shapes.push_back(e.x.sizes);
    for (const Recipe& r : e.operands) rep.shapes.push_back(r.defined ? std::optional<Shape>(r.sizes) : std::nullopt);
    for (const PieceRun& p : e.pieces) rep.engines.push_back(plan_engine(p.graph));
    if (options.measure && e.x.options.device.is_cuda()) {
      const std::vector<std::string> names = e.block.operand_names();
      std::vector<Tensor> ops;
      for (size_t i = 0; i < e.operands.size(); ++i) ops.push_back(make(e.operands[i], names[i], gen));
      rep.timing = measure(e.block, make(e.x, "x", gen), ops, options.iterations);
      rep.measured = true;
    }
    out.push_back(std::move(rep));
  }
  return out;
}

std::string report(ReportOptions options) {
  const std::vector<BlockReport> reports = block_reports(options);
  const std::string traced = traced_plans_str();
  if (reports.empty()) return traced + "fusion report: no fused blocks ran on a GPU\n";
  std::string s = traced + fmt::format("fusion report: {} block{}\n", reports.size(), reports.size() == 1 ? "" : "s");
  for (const BlockReport& r : reports) {
    s += fmt::format("block {}\n  input {}, {} run{}\n", r.block, r.input, r.runs, r.runs == 1 ? "" : "s");
    for (size_t i = 0; i < r.pieces.size(); ++i) {
      const PieceRun& p = r.pieces[i];
      s += fmt::format("  {}: {}", p.piece, p.how);
      if (!r.engines[i].empty()) s += " (" + r.engines[i] + ")";
      if (!p.why_not.empty()) s += "; did not fuse: " + p.why_not;
      if (!p.backward.empty()) s += "; backward: " + p.backward;
      s += "\n";
    }
    if (r.measured) {
      const Timing& t = r.timing;
      s += fmt::format("  forward: fused {:.3f} ms, unfused {:.3f} ms; forward+backward: fused {:.3f} ms, "
                       "unfused {:.3f} ms\n",
                       t.fused_forward_ms, t.unfused_forward_ms, t.fused_backward_ms, t.unfused_backward_ms);
    }
  }
  return s;
}

void clear_report() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.runs.clear();
  clear_traced_plans();
}

}  // namespace loom::fusion
