// File: core/ops/fusion_report.h
// What the fused blocks (fusion.h) did on this GPU: for each block and input
// shape that ran, its pieces, how each ran (one cuDNN graph and its engine,
// knobs, behaviour notes and workspace; a fused op; or unfused, and why), how a
// head's backward ran (which tier of its derivative chain), and,
// when asked, the measured time fused vs unfused, forward and backward.
//
//   Tensor y = block(x, {w, b});                       // on the GPU
//   std::cout << loom::fusion::report({.measure = true});
//
// The trainers print it with --fusion-report. Measuring re-runs each block on
// random inputs of the recorded shapes (with fusion on, then off): never call it
// inside a CUDA-graph capture or a timed region.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/fusion.h"
#include "core/tensor.h"

namespace loom::fusion {

// How one piece of one block ran.
struct PieceRun {
  std::string piece;    // "[conv2d(stride=1, padding=1) -> bias -> gelu]"
  std::string how;      // "one cuDNN graph", "fused op batch_norm_relu", "unfused"
  std::string graph;    // the graph's pattern (plan-cache listing) when one was tried
  std::string why_not;  // why it did not fuse ("" when it did)
  // A head's backward, once one ran: "derivative fused into dgrad/wgrad (engine N)",
  // "derivative as one graph (engine N) + dgrad/wgrad" or "derivative unfused: <why>".
  std::string backward;
};

// Called by Block on every GPU run: keeps the latest run per (block, input shape).
void note_block_run(const Block& block, const Tensor& x, const std::vector<Tensor>& operands,
                    std::vector<PieceRun> pieces);
// The key note_block_run files a run under, for what is noted later: how a
// head's backward ran (piece `piece` of that run gets `how` as its backward).
std::string run_key(const Block& block, const Tensor& x);
void note_backward(const std::string& run_key, size_t piece, std::string how);

// Milliseconds per call, averaged over `iterations` after one warm-up call;
// "backward" is a forward plus its backward.
struct Timing {
  double fused_forward_ms = 0, unfused_forward_ms = 0;
  double fused_backward_ms = 0, unfused_backward_ms = 0;
};
// Times `block` on these inputs (GPU tensors), fused and with FusionGuard off.
// Operands that require grad get gradients in the backward runs.
Timing measure(const Block& block, const Tensor& x, const std::vector<Tensor>& operands,
               int iterations = 20);

struct BlockReport {
  Block spec;
  std::vector<std::optional<Shape>> shapes;  // x, then each operand (nullopt: undefined)
  std::string block;  // Block::str()
  std::string input;  // "(8, 16, 32, 32) nhwc float32"
  int64_t runs = 0;
  std::vector<PieceRun> pieces;
  std::vector<std::string> engines;  // per piece: "engine 7, knobs ..., workspace 0 B" or ""
  bool measured = false;
  Timing timing;
};

struct ReportOptions {
  bool measure = false;  // time every recorded block (GPU only)
  int iterations = 20;
};

std::vector<BlockReport> block_reports(ReportOptions options = {});
// The reports as text: the traced forwards' plans (fusion_trace.h), then one
// paragraph per block; "no fused blocks ran" when none did.
std::string report(ReportOptions options = {});
void clear_report();

}  // namespace loom::fusion
