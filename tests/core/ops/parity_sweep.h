// File: tests/core/ops/parity_sweep.h
// Seeded random op configurations, each run in float32 on a device (under a
// numerics policy, layout, fusion and determinism setting) and in float64 on
// the CPU, comparing the forward output, every input and parameter gradient and
// the updated running statistics. Case k of seed s is the same configuration on
// every machine, so a failure is rerun with one command:
//   LOOM_SWEEP_SEED=s LOOM_SWEEP_CASE=k <test binary>
//
// N batch, C channels, H, W input, K out channels, R, S filter; M rows, In, Out features.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/numerics.h"
#include "core/tensor.h"

namespace loom::sweep {

enum class Op {
  Conv2d, Linear, BatchNorm, BatchNormActivation, Relu, MaxPool, AvgPool, Softmax, LogSoftmax,
  CrossEntropy, Chain,
  // The ops users reach for beyond the reference models' (issue 32): resizing,
  // padding, abs, cat / stack across dtypes, channel dropout, and masks built
  // with logical ops, isclose and mul.
  Interpolate, Pad, Abs, Cat, Dropout2d, Mask,
  // The normalization family's other parameterisations (issue 36).
  GroupNorm, InstanceNorm,
  // Composites users reach for: the regression and binary losses, statistics
  // along dims (var, std, logsumexp, min), maximum / minimum, and flip with
  // chunk.
  Losses, Statistics, Extremum, Flip,
  // Ordering and running sums: sort, topk, median or kthvalue values (their
  // gradient scattered back through the positions), and cumsum, cumprod, prod.
  Sort, Cumsum,
  // sin or cos, then tril or triu and repeat (the matrices of a causal mask,
  // a positional encoding's waves).
  Triangle,
  // Writing and reading at indices: scatter_add, scatter, index_add, gather,
  // masked_select; and the math rows log1p to sign.
  Scatter, Math,
  // conv1d on (N, C, L), NCL or length-major, then max, average, adaptive
  // average or adaptive max pooling along L, or none.
  Conv1d,
  // vector_norm over random dims and ords, cosine_similarity along a random
  // dim, pairwise_distance; the second operand may broadcast.
  Distance,
  // One recurrent layer (rnn_layer): tanh, relu, LSTM or GRU, either
  // direction, with or without biases; output and final state compared.
  Rnn,
};
const char* op_name(Op op);

struct Case {
  uint64_t seed = 0;
  int64_t index = 0;
  Op op = Op::Conv2d;
  Precision precision = Precision::StrictFp32;
  bool deterministic = false;
  bool channels_last = false;
  bool fused = false;  // Chain only: batch_norm_relu instead of batch_norm then relu
  bool float64 = false;  // the device run in float64 instead of float32
  // Op settings by name ("N", "C", "kernel_h", "ceil_mode", ...): see make_case.
  std::map<std::string, int64_t> ints;
  double label_smoothing = 0;

  int64_t at(const std::string& name) const { return ints.at(name); }
  std::string describe() const;  // every setting, for a failure message
};

// Case `index` of `seed`. `precisions` are the policies it may draw (the CPU
// ignores the policy, so its subset draws strict fp32 only).
Case make_case(uint64_t seed, int64_t index, const std::vector<Precision>& precisions);

// max |a - ref| / max(max |ref|, floor) over float64 tensors: the floor keeps
// values that cancel to ~0 (a conv bias gradient before batch norm is exactly
// 0) judged on their case's scale. Infinite for a non-finite value where ref is
// finite, or a shape mismatch.
double relative_error(const Tensor& a, const Tensor& ref, double floor = 1e-3);

// The largest allowed error, relative to the reference's largest magnitude.
double tolerance(Precision precision);

// Each tensor may be off by tolerance(precision) of its scale, or, where that
// is larger (device runs), by 10x the CPU's own float32 error in the same case
// (times 2^13 under tf32, whose operands have 10 mantissa bits, not 23, and
// 2^16 under bf16, whose gradients have 7).
struct Outcome {
  double worst_ratio = 0;    // max over the compared tensors of error / allowed error
  double worst_error = 0;    // the error and allowed error of that tensor
  double allowed_error = 0;
  std::string worst_tensor;  // which tensor had it ("y", "grad x", "running_var", ...)
  bool fallback = false;     // some key ran on the tier below cuDNN (GPU only)
  bool decision_flips = false;  // a chain gradient passed with <= 1% of its elements off
  std::string failure;       // an exception from either side, else ""

  bool passed() const;
};

// Runs the case on `device` in float32 (or float64) and on the CPU in float64.
Outcome run_case(const Case& c, Device device);

// Cases run, passed (and how many with decision flips), worst error /
// tolerance and fallback runs per (op, precision).
class Summary {
 public:
  void add(const Case& c, const Outcome& outcome, bool passed);
  std::string table() const;  // Markdown, one row per (op, precision)
  int64_t failures() const { return failures_; }

 private:
  struct Row {
    int64_t cases = 0, passed = 0, fallback = 0, flips = 0;
    double worst_ratio = 0;  // worst error / allowed error
  };
  std::map<std::pair<std::string, std::string>, Row> rows_;
  int64_t failures_ = 0;
};

// Runs `count` cases of each seed from LOOM_SWEEP_SEEDS (comma-separated, else
// `default_seeds`) starting at LOOM_SWEEP_FIRST (else 0); LOOM_SWEEP_COUNT
// overrides `count`, and LOOM_SWEEP_CASE runs that one case. Prints each
// failure with its rerun command and the summary table; returns the summary.
Summary run_sweep(Device device, const std::vector<Precision>& precisions,
                  const std::vector<uint64_t>& default_seeds, int64_t count);

}  // namespace loom::sweep
