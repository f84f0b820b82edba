// File: tests/core/ops/parity_sweep.cc
// The random configurations of parity_sweep.h and the two runs that compare them.
//
// N batch, C channels, H, W input, K out channels, R, S filter; M rows, In, Out features.
#include "tests/core/ops/parity_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>

#include "core/autocast.h"
#include "core/cpu/conv.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "core/tensor.h"
#ifdef LOOM_WITH_CUDA
#include "core/cudnn/plan_cache.h"
#endif

namespace loom::sweep {

namespace {

constexpr Op kOps[] = {
    Op::Conv2d,     Op::Linear,       Op::BatchNorm, Op::BatchNormActivation, Op::Relu,
    Op::MaxPool,    Op::AvgPool,      Op::Softmax,   Op::LogSoftmax,          Op::CrossEntropy,
    Op::Chain,      Op::Interpolate,  Op::Pad,       Op::Abs,                 Op::Cat,
    Op::Dropout2d,  Op::Mask,         Op::GroupNorm, Op::InstanceNorm,        Op::Losses,
    Op::Statistics, Op::Extremum,     Op::Flip,      Op::Sort,                Op::Cumsum,
    Op::Triangle,   Op::Scatter,      Op::Math,      Op::Conv1d,              Op::Distance,
    Op::Rnn};

class Draw {
 public:
  explicit Draw(uint64_t seed) : rng_(seed) {}
  int64_t between(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin() { return between(0, 1) == 1; }
  template <class T>
  T pick(const std::vector<T>& options) {
    return options[static_cast<size_t>(between(0, static_cast<int64_t>(options.size()) - 1))];
  }

 private:
  std::mt19937_64 rng_;
};

uint64_t case_seed(uint64_t seed, int64_t index) {
  return seed * 1000003ull + static_cast<uint64_t>(index) * 7919ull + 17;
}

// The smallest input extent that gives at least one output for a window.
int64_t fit_extent(int64_t extent, int64_t window, int64_t pad) {
  return std::max(extent, std::max<int64_t>(1, window - 2 * pad));
}

// Keeps the float64 CPU reference cheap: halves N until the work is small.
int64_t capped_batch(int64_t n, int64_t work_per_sample, int64_t budget) {
  while (n > 1 && n * work_per_sample > budget) n /= 2;
  return n;
}

// C, K and groups of a convolution: one group, 2, 3 or depthwise.
void draw_channels(Draw& d, Case& c) {
  const int64_t groups_kind = d.between(0, 5);  // 0-2: 1 group, 3: 2, 4: 3, 5: depthwise
  int64_t g = groups_kind <= 2 ? 1 : groups_kind == 3 ? 2 : groups_kind == 4 ? 3 : 0;
  int64_t cin, kout;
  if (g == 0) {
    cin = d.between(1, 64);
    g = cin;
    kout = cin * d.between(1, 2);
  } else {
    cin = g * d.between(1, 64 / g);
    kout = g * d.between(1, 64 / g);
  }
  c.ints["C"] = cin, c.ints["K"] = kout, c.ints["groups"] = g;
}

void draw_conv(Draw& d, Case& c) {
  draw_channels(d, c);
  auto& v = c.ints;
  const int64_t cin = v["C"], kout = v["K"], g = v["groups"];
  v["R"] = d.between(1, 7), v["S"] = d.between(1, 7);
  v["stride_h"] = d.between(1, 3), v["stride_w"] = d.between(1, 3);
  v["dilation_h"] = d.between(1, 3), v["dilation_w"] = d.between(1, 3);
  v["pad_h"] = d.between(0, 3), v["pad_w"] = d.between(0, 3);
  v["H"] = fit_extent(d.between(1, 40), v["dilation_h"] * (v["R"] - 1) + 1, v["pad_h"]);
  v["W"] = fit_extent(d.between(1, 40), v["dilation_w"] * (v["S"] - 1) + 1, v["pad_w"]);
  v["bias"] = d.coin();
  const int64_t work = v["H"] * v["W"] * kout * (cin / g) * v["R"] * v["S"];
  v["N"] = capped_batch(d.between(1, 8), work, 40'000'000);
}

// conv1d's geometry, then a pooling of its output (kind 0 none, 1 max, 2 avg,
// 3 adaptive avg, 4 adaptive max) that leaves at least one element.
void draw_conv1d(Draw& d, Case& c) {
  draw_channels(d, c);
  auto& v = c.ints;
  v["R"] = d.between(1, 9), v["stride"] = d.between(1, 3), v["dilation"] = d.between(1, 3);
  v["pad"] = d.between(0, 4);
  v["L"] = fit_extent(d.between(1, 200), v["dilation"] * (v["R"] - 1) + 1, v["pad"]);
  v["bias"] = d.coin();
  v["N"] = capped_batch(d.between(1, 8), v["L"] * v["K"] * (v["C"] / v["groups"]) * v["R"], 40'000'000);
  const int64_t length = cpu::conv_output_size(v["L"], v["R"], v["stride"], v["pad"], v["dilation"]);
  v["pool"] = d.between(0, 4);
  v["pool_kernel"] = d.between(1, 5), v["pool_stride"] = d.between(1, 3);
  v["pool_pad"] = d.between(0, v["pool_kernel"] / 2);
  v["ceil_mode"] = d.coin(), v["count_include_pad"] = d.coin();
  v["pool_size"] = d.between(1, 8);
  if ((v["pool"] == 1 || v["pool"] == 2) && length + 2 * v["pool_pad"] < v["pool_kernel"]) v["pool"] = 0;
}

void draw_pool(Draw& d, Case& c) {
  auto& v = c.ints;
  v["N"] = d.between(1, 6), v["C"] = d.between(1, 64);
  v["kernel_h"] = d.between(1, 5), v["kernel_w"] = d.between(1, 5);
  v["stride_h"] = d.between(1, 3), v["stride_w"] = d.between(1, 3);
  v["pad_h"] = d.between(0, v["kernel_h"] / 2), v["pad_w"] = d.between(0, v["kernel_w"] / 2);
  v["H"] = fit_extent(d.between(1, 40), v["kernel_h"], v["pad_h"]);
  v["W"] = fit_extent(d.between(1, 40), v["kernel_w"], v["pad_w"]);
  v["ceil_mode"] = d.coin();
  v["count_include_pad"] = d.coin();
}

// An image (N, C, H, W) of modest size: channel counts that are not multiples
// of 8 and odd extents included.
void draw_image(Draw& d, Case& c, int64_t max_extent) {
  auto& v = c.ints;
  v["N"] = d.between(1, 4), v["C"] = d.between(1, 40);
  v["H"] = d.between(1, max_extent), v["W"] = d.between(1, max_extent);
}

void draw_interpolate(Draw& d, Case& c) {
  draw_image(d, c, 20);
  auto& v = c.ints;
  v["bilinear"] = d.coin();
  v["align_corners"] = v["bilinear"] && d.coin();
  v["by_size"] = d.coin();
  if (v["by_size"]) {
    v["P"] = d.between(1, 40), v["Q"] = d.between(1, 40);
    return;
  }
  // Scale factors in percent; the output keeps at least one pixel.
  const std::vector<int64_t> percents = {50, 75, 100, 130, 150, 200, 250, 300};
  v["scale_h_pct"] = d.pick(percents), v["scale_w_pct"] = d.pick(percents);
  v["recompute"] = d.coin();
  if (v["H"] * v["scale_h_pct"] < 100) v["H"] = 2;
  if (v["W"] * v["scale_w_pct"] < 100) v["W"] = 2;
}

// Pads that every mode accepts for the drawn extents: reflect's below the
// extent, crops that leave at least one element.
void draw_pad(Draw& d, Case& c) {
  draw_image(d, c, 16);
  auto& v = c.ints;
  v["mode"] = d.between(0, 2);  // constant, reflect, replicate
  v["dims"] = v["mode"] == 0 ? d.between(1, 3) : d.between(1, 2);
  v["value_x4"] = d.between(-8, 8);
  const char* extents[] = {"W", "H", "C"};
  for (int64_t k = 0; k < v["dims"]; ++k) {
    const int64_t n = v[extents[k]];
    const int64_t most = v["mode"] == 1 ? n - 1 : 4;  // reflect: below the extent
    int64_t before = d.between(-(n - 1) / 2, std::max<int64_t>(0, most));
    int64_t after = d.between(-(n - 1) / 2, std::max<int64_t>(0, most));
    if (n + before + after < 1) before = after = 0;
    v["before" + std::to_string(k)] = before, v["after" + std::to_string(k)] = after;
  }
}

void draw_cat(Draw& d, Case& c) {
  auto& v = c.ints;
  v["stack"] = d.coin();
  v["parts"] = d.between(2, 3);
  v["dims"] = d.between(1, 4);
  v["dim"] = d.between(0, v["dims"] - (v["stack"] ? 0 : 1));
  for (int64_t k = 0; k < v["dims"]; ++k) v["size" + std::to_string(k)] = d.between(1, 12);
  for (int64_t p = 0; p < v["parts"]; ++p) v["len" + std::to_string(p)] = d.between(1, 9);
}

// Group and instance norm: at least 4 values per normalized group (one channel
// of one sample for instance norm), for the reason batch norm's draw gives.
void draw_group_norm(Draw& d, Case& c) {
  auto& v = c.ints;
  v["N"] = d.between(1, 4), v["H"] = d.between(1, 16), v["W"] = d.between(1, 16);
  v["groups"] = c.op == Op::GroupNorm ? d.between(1, 8) : 1;
  v["C"] = c.op == Op::GroupNorm ? v["groups"] * d.between(1, 6) : d.between(1, 40);
  const int64_t channels_per_group = c.op == Op::GroupNorm ? v["C"] / v["groups"] : 1;
  while (channels_per_group * v["H"] * v["W"] < 4) ++v["W"];
  v["affine"] = d.coin();
  v["track"] = c.op == Op::InstanceNorm && d.coin();
  v["input_stats"] = !v["track"] || d.between(0, 3) > 0;
}

// An elementwise loss ("loss": l1, smooth_l1, huber, BCE with logits, BCE with
// weight and pos_weight, BCE of sigmoid probabilities with weight, kl_div of
// log_softmax against softmax, kl_div with log_target) under a reduction (kl_div
// also BatchMean), with smooth_l1's beta or huber's delta.
void draw_losses(Draw& d, Case& c) {
  draw_image(d, c, 16);
  auto& v = c.ints;
  v["loss"] = d.between(0, 7);
  v["reduction"] = d.between(0, v["loss"] >= 6 ? 3 : 2);
  v["beta_pct"] = d.pick<int64_t>({v["loss"] == 1 ? 0 : 25, 50, 100, 300});
}

// A statistic ("stat": var, std, logsumexp, min along a dim, min of all) over
// dim "dim" or (with "two") "dim" and the last dim; var and std need more than
// `correction` values, and std more than one (its gradient at 0 is inf).
void draw_statistics(Draw& d, Case& c) {
  draw_image(d, c, 12);
  auto& v = c.ints;
  v["stat"] = d.between(0, 4);
  v["dim"] = d.between(0, 2);
  v["two"] = v["stat"] <= 2 && d.coin();
  v["keepdim"] = d.coin();
  const std::string extent = std::string(1, "NCH"[v["dim"]]);
  const int64_t count = v[extent] * (v["two"] ? v["W"] : 1);
  if (count < 3 && v["stat"] <= 1) v[extent] = 3;
  v["correction"] = d.between(0, 1);
}

void draw_op(Draw& d, Case& c) {
  auto& v = c.ints;
  switch (c.op) {
    case Op::Conv2d: draw_conv(d, c); break;
    case Op::Conv1d: draw_conv1d(d, c); break;
    case Op::Linear:
      v["M"] = d.between(1, 64), v["In"] = d.between(1, 128), v["Out"] = d.between(1, 128);
      v["bias"] = d.coin();
      break;
    case Op::BatchNorm:
      v["spatial"] = d.coin();
      v["C"] = d.between(1, 64);
      v["N"] = v["spatial"] ? d.between(1, 8) : d.between(2, 64);
      v["H"] = v["spatial"] ? d.between(1, 20) : 1, v["W"] = v["spatial"] ? d.between(1, 20) : 1;
      v["training"] = d.between(0, 3) > 0;
      // At least 4 values per channel: over 2, dx is 0 from terms of size
      // invstd * dy, a cancellation no float32 arithmetic resolves.
      if (v["N"] * v["H"] * v["W"] < 4) v["N"] = 4;
      v["affine"] = d.coin();
      v["track"] = v["training"] ? d.coin() : 1;
      break;
    case Op::BatchNormActivation:
      v["N"] = d.between(1, 8), v["C"] = d.between(1, 64);
      v["H"] = d.between(1, 20), v["W"] = d.between(1, 20);
      if (v["N"] * v["H"] * v["W"] < 2) v["N"] = 2;
      v["affine"] = d.coin();
      v["residual"] = d.coin();
      // An index into kernel::kActivationKinds, each row with its default scalars.
      v["activation"] = d.between(0, static_cast<int64_t>(std::size(kernel::kActivationKinds)) - 1);
      break;
    case Op::Relu:
      v["N"] = d.between(1, 8), v["C"] = d.between(1, 64), v["H"] = d.between(1, 30),
      v["W"] = d.between(1, 30);
      break;
    case Op::MaxPool:
    case Op::AvgPool: draw_pool(d, c); break;
    case Op::Softmax:
    case Op::LogSoftmax:
      v["spatial"] = d.coin();
      v["N"] = d.between(1, 64), v["C"] = d.between(1, 100);
      v["H"] = v["spatial"] ? d.between(1, 8) : 1, v["W"] = v["spatial"] ? d.between(1, 8) : 1;
      break;
    case Op::CrossEntropy:
      // "target": 0 class indices, 1 class probabilities of the logits' shape, 2 one sample's logits (C).
      v["target"] = d.between(0, 2);
      v["N"] = v["target"] == 2 ? 1 : d.between(1, 64), v["C"] = d.between(2, 100);
      v["spatial"] = v["target"] != 2 && d.coin();
      v["H"] = v["spatial"] ? d.between(1, 6) : 1, v["W"] = v["spatial"] ? d.between(1, 6) : 1;
      v["reduction"] = d.between(0, 2);
      c.label_smoothing = d.pick<double>({0.0, 0.0, 0.1, 0.25});
      break;
    case Op::Interpolate: draw_interpolate(d, c); break;
    case Op::GroupNorm:
    case Op::InstanceNorm: draw_group_norm(d, c); break;
    case Op::Pad: draw_pad(d, c); break;
    case Op::Abs:
    case Op::Mask: draw_image(d, c, 24); break;
    case Op::Cat: draw_cat(d, c); break;
    case Op::Losses: draw_losses(d, c); break;
    case Op::Statistics: draw_statistics(d, c); break;
    case Op::Extremum:
      draw_image(d, c, 16);
      v["larger"] = d.coin();
      v["broadcast"] = d.coin();  // w is (1, C, 1, W) rather than x's shape
      break;
    case Op::Flip:
      draw_image(d, c, 16);
      v["dims_mask"] = d.between(1, 15);  // bit k: flip dim k
      v["chunk_dim"] = d.between(0, 3);
      v["chunks"] = d.between(1, 4);
      break;
    case Op::Sort:
    case Op::Cumsum: {
      draw_image(d, c, c.op == Op::Sort ? 12 : 24);
      v["dim"] = d.between(0, 3);
      v["descending"] = d.coin();
      v["topk"] = d.coin();
      v["k"] = d.between(0, v[std::string(1, "NCHW"[v["dim"]])]);
      v["kind"] = d.between(0, 2);  // Sort: sort / topk, median, kthvalue; Cumsum: cumsum, cumprod, prod
      break;
    }
    case Op::Triangle:
      draw_image(d, c, 12);
      v["cos"] = d.coin();
      v["lower"] = d.coin();
      v["diagonal"] = d.between(-4, 4);
      v["lead"] = d.between(0, 1);  // a new leading dim from repeat
      for (int64_t k = 0; k < 4; ++k) v["repeat" + std::to_string(k)] = d.between(1, 2);
      break;
    case Op::Dropout2d:
      draw_image(d, c, 12);
      v["p_pct"] = d.pick<int64_t>({10, 30, 50});
      break;
    case Op::Scatter: {
      draw_image(d, c, 12);
      v["dim"] = d.between(0, 3);
      // scatter_add, scatter (distinct places per line), index_add, gather, masked_select
      v["kind"] = d.between(0, 4);
      const int64_t size = v[std::string(1, "NCHW"[v["dim"]])];
      v["len"] = v["kind"] == 1 ? d.between(1, size) : d.between(1, size + 2);  // the index's extent along dim
      v["alpha_x4"] = d.between(-8, 8);
      break;
    }
    case Op::Math:
      draw_image(d, c, 16);
      v["fn"] = d.between(0, 8);
      break;
    case Op::Distance:
      draw_image(d, c, 16);
      v["kind"] = d.between(0, 2);  // vector_norm, cosine_similarity, pairwise_distance
      v["ord"] = d.between(0, 6);   // kDistanceOrds
      v["dims_mask"] = d.between(0, 15);  // vector_norm: bit k reduces dim k; none: every dim
      // cosine_similarity along C or W, both operands' full extents, of 2 or
      // more: along one element the similarity is the constant +-1, whose
      // zero gradient is a difference of large terms in float32.
      v["dim"] = d.pick<int64_t>({1, 3, -3, -1});
      {
        int64_t& extent = v[(v["dim"] + 4) % 4 == 1 ? "C" : "W"];
        extent = std::max<int64_t>(extent, 2);
      }
      v["keepdim"] = d.coin();
      v["broadcast"] = d.coin();  // w is (1, C, 1, W) rather than x's shape
      break;
    case Op::Rnn:
      v["mode"] = d.between(0, 3);  // RnnMode: tanh, relu, LSTM, GRU
      v["L"] = d.between(1, 6), v["N"] = d.between(1, 8);
      v["In"] = d.between(1, 16), v["Hidden"] = d.between(1, 16);
      v["bias"] = d.coin();
      v["reverse"] = d.coin();
      break;
    case Op::Chain:
      v["N"] = d.between(2, 16), v["C"] = d.between(1, 4), v["K"] = d.between(1, 32);
      v["R"] = d.pick<int64_t>({1, 3, 5});
      v["pad"] = d.between(0, v["R"] / 2);
      v["H"] = d.between(6, 24), v["W"] = d.between(6, 24);
      v["classes"] = d.between(2, 10);
      v["bias"] = d.coin();
      break;
  }
}

// ---- the two runs ---------------------------------------------------------------------

// Named float64 CPU tensors: the case's inputs and parameters.
struct Operands {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Tensor target;  // int64 class indices (cross-entropy's index form and the chain)

  const Tensor& get(const std::string& name) const {
    for (const auto& [n, t] : tensors) {
      if (n == name) return t;
    }
    throw ValueError(fmt::format("[parity_sweep] no operand {}", name));
  }
};

Tensor normal(const Shape& s, Generator& gen) { return randn(s, {.dtype = DType::Float64}, &gen); }
Tensor positive(const Shape& s, Generator& gen) {
  return add(rand(s, {.dtype = DType::Float64}, &gen), 0.5);
}

// The chain's conv output extent along "H" or "W" (stride 1).
int64_t conv_extent(const Case& c, const std::string& dim) {
  return c.at(dim) + 2 * c.at("pad") - c.at("R") + 1;
}

Operands make_operands(const Case& c) {
  Generator gen(case_seed(c.seed, c.index) ^ 0x5eedull);
  Operands o;
  auto add_t = [&o](const std::string& name, Tensor t) { o.tensors.emplace_back(name, t); };
  auto image = [&c]() { return Shape{c.at("N"), c.at("C"), c.at("H"), c.at("W")}; };
  switch (c.op) {
    case Op::Conv2d:
      add_t("x", normal(image(), gen));
      add_t("weight", normal({c.at("K"), c.at("C") / c.at("groups"), c.at("R"), c.at("S")}, gen));
      if (c.at("bias")) add_t("bias", normal({c.at("K")}, gen));
      break;
    case Op::Conv1d:
      add_t("x", normal({c.at("N"), c.at("C"), c.at("L")}, gen));
      add_t("weight", normal({c.at("K"), c.at("C") / c.at("groups"), c.at("R")}, gen));
      if (c.at("bias")) add_t("bias", normal({c.at("K")}, gen));
      break;
    case Op::Linear:
      add_t("x", normal({c.at("M"), c.at("In")}, gen));
      add_t("weight", normal({c.at("Out"), c.at("In")}, gen));
      if (c.at("bias")) add_t("bias", normal({c.at("Out")}, gen));
      break;
    case Op::BatchNormActivation:
      add_t("x", normal(image(), gen));
      if (c.at("affine")) {
        add_t("weight", positive({c.at("C")}, gen));
        add_t("bias", normal({c.at("C")}, gen));
      }
      if (c.at("residual")) add_t("residual", normal(image(), gen));
      break;
    case Op::GroupNorm:
    case Op::InstanceNorm:
    case Op::BatchNorm: {
      Shape s = c.ints.count("spatial") == 0 || c.at("spatial") ? image() : Shape{c.at("N"), c.at("C")};
      // A large mean with a small spread: the variance must not cancel.
      add_t("x", add(mul(normal(s, gen), 0.5), 3.0));
      if (c.at("affine")) {
        add_t("weight", positive({c.at("C")}, gen));
        add_t("bias", normal({c.at("C")}, gen));
      }
      break;
    }
    case Op::CrossEntropy: {
      const Shape logits = c.at("target") == 2 ? Shape{c.at("C")}
                           : c.at("spatial")     ? image()
                                                 : Shape{c.at("N"), c.at("C")};
      add_t("x", normal(logits, gen));
      if (c.at("target") == 1) {
        add_t("probabilities", softmax(normal(logits, gen), 1));
        break;
      }
      Shape classes_at = logits;  // the logits without their class dim
      classes_at.erase(classes_at.begin() + (logits.size() == 1 ? 0 : 1));
      o.target = randint(0, c.at("C"), classes_at, {.dtype = DType::Int64}, &gen);
      break;
    }
    case Op::Softmax:
    case Op::LogSoftmax:
      add_t("x", normal(c.at("spatial") ? image() : Shape{c.at("N"), c.at("C")}, gen));
      break;
    case Op::Chain: {
      add_t("x", normal(image(), gen));
      add_t("conv weight", mul(normal({c.at("K"), c.at("C"), c.at("R"), c.at("R")}, gen), 0.5));
      if (c.at("bias")) add_t("conv bias", normal({c.at("K")}, gen));
      add_t("bn weight", positive({c.at("K")}, gen));
      add_t("bn bias", normal({c.at("K")}, gen));
      const int64_t features = c.at("K") * (conv_extent(c, "H") / 2) * (conv_extent(c, "W") / 2);
      add_t("fc weight", mul(normal({c.at("classes"), features}, gen), 0.1));
      add_t("fc bias", normal({c.at("classes")}, gen));
      o.target = randint(0, c.at("classes"), {c.at("N")}, {.dtype = DType::Int64}, &gen);
      break;
    }
    case Op::Cat:
      for (int64_t p = 0; p < c.at("parts"); ++p) {
        Shape sizes;
        for (int64_t k = 0; k < c.at("dims"); ++k) sizes.push_back(c.at("size" + std::to_string(k)));
        if (!c.at("stack")) sizes[c.at("dim")] = c.at("len" + std::to_string(p));
        add_t(std::string(1, static_cast<char>('x' + p)), normal(sizes, gen));  // x, y, z
      }
      break;
    case Op::Mask:
      add_t("x", normal(image(), gen));
      add_t("w", normal(image(), gen));
      break;
    case Op::Losses: {
      const int64_t loss = c.at("loss");
      // BCE-with-logits' logits across sigmoid's range; BCE's sigmoid(x) stays where fp32 resolves 1 - sigmoid(x).
      add_t("x", mul(normal(image(), gen), loss == 3 || loss == 4 ? 3.0 : 1.0));
      const bool probabilities = loss >= 3 && loss <= 5;
      add_t("target", probabilities ? rand(image(), {.dtype = DType::Float64}, &gen) : normal(image(), gen));
      if (loss == 4 || loss == 5) add_t("weight", positive({c.at("C"), 1, 1}, gen));
      if (loss == 4) add_t("pos_weight", mul(positive({c.at("W")}, gen), 2.0));
      break;
    }
    case Op::Statistics:
      // Far from 0 for var and std, so the deviations must not cancel.
      add_t("x", c.at("stat") <= 1 ? add(normal(image(), gen), 4.0) : mul(normal(image(), gen), 3.0));
      break;
    case Op::Extremum:
    case Op::Distance:
      add_t("x", normal(image(), gen));
      add_t("w", normal(c.at("broadcast") ? Shape{1, c.at("C"), 1, c.at("W")} : image(), gen));
      break;
    case Op::Rnn: {
      const RnnMode mode = static_cast<RnnMode>(c.at("mode"));
      const int64_t hidden = c.at("Hidden"), rows = rnn_gate_count(mode) * hidden;
      add_t("x", normal({c.at("L"), c.at("N"), c.at("In")}, gen));
      add_t("h0", normal({c.at("N"), hidden}, gen));
      if (mode == RnnMode::Lstm) add_t("c0", normal({c.at("N"), hidden}, gen));
      // PyTorch's scale, U(-1/sqrt(H), 1/sqrt(H)) has this order: states neither die nor blow up.
      add_t("w_ih", mul(normal({rows, c.at("In")}, gen), 1.0 / std::sqrt(static_cast<double>(c.at("In")))));
      add_t("w_hh", mul(normal({rows, hidden}, gen), 1.0 / std::sqrt(static_cast<double>(hidden))));
      if (c.at("bias")) {
        add_t("b_ih", mul(normal({rows}, gen), 0.5));
        add_t("b_hh", mul(normal({rows}, gen), 0.5));
      }
      break;
    }
    case Op::Scatter: {
      add_t("x", normal(image(), gen));
      Shape along = image();
      along[c.at("dim")] = c.at("len");
      if (c.at("kind") <= 2) add_t("w", normal(along, gen));  // src, or index_add's source
      break;
    }
    default: add_t("x", normal(image(), gen)); break;
  }
  return o;
}

// Running statistics start as random buffers (mean 0-ish, var positive).
struct Running {
  Tensor mean, var;
};

Running make_running(const Case& c, int64_t channels) {
  Generator gen(case_seed(c.seed, c.index) ^ 0xb0ffull);
  return {normal({channels}, gen), positive({channels}, gen)};
}

Pool2dOptions pool_options(const Case& c) {
  return {.kernel_size = {c.at("kernel_h"), c.at("kernel_w")},
          .stride = std::array<int64_t, 2>{c.at("stride_h"), c.at("stride_w")},
          .padding = {c.at("pad_h"), c.at("pad_w")},
          .ceil_mode = c.at("ceil_mode") != 0,
          .count_include_pad = c.at("count_include_pad") != 0};
}

// What bf16 autocast does to numbers, applied to the float64 reference so that
// it computes the function the policy defines: conv and matmul operands are
// rounded to bf16 (7 mantissa bits), and conv, matmul and batch-norm results
// are stored in bf16. Without it, a value the GPU rounds across a ReLU's 0 or a
// max-pool window's maximum takes the other branch, and the two runs compute
// different functions. (TF32 is not emulated: whether an engine rounds to TF32
// is the engine's choice, so the reference stays exact there.)
struct Rounding {
  int operand_bits = 52;  // float64: nothing rounded
  int storage_bits = 52;

  static Rounding of(Precision precision) {
    switch (precision) {
      case Precision::Bf16: return {7, 7};
      case Precision::Fp16: return {10, 10};
      case Precision::Tf32:
      case Precision::StrictFp32: break;
    }
    return {};
  }
};

// x rounded to `bits` explicit mantissa bits (to nearest, ties to even, via
// float32), passing gradients straight through as the policy's casts do.
Tensor round_to(const Tensor& x, int bits) {
  if (bits >= 23 || !x.defined()) return x;
  Tensor r = x.detach().contiguous().clone();
  double* p = r.data_ptr<double>();
  const uint32_t drop = 23 - bits;
  for (int64_t i = 0; i < r.numel(); ++i) {
    float f = static_cast<float>(p[i]);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u += (1u << (drop - 1)) - 1 + ((u >> drop) & 1u);
    u &= ~((1u << drop) - 1);
    std::memcpy(&f, &u, sizeof u);
    p[i] = f;
  }
  return add(sub(x, x.detach()), r);
}

InterpolateOptions interpolate_options(const Case& c) {
  InterpolateOptions o{.mode = c.at("bilinear") ? InterpolateMode::Bilinear : InterpolateMode::Nearest,
                       .align_corners = c.at("align_corners") != 0};
  if (c.at("by_size")) {
    o.size = Size2{c.at("P"), c.at("Q")};
  } else {
    o.scale_factor = Scale2{c.at("scale_h_pct") / 100.0, c.at("scale_w_pct") / 100.0};
    o.recompute_scale_factor = c.at("recompute") != 0;
  }
  return o;
}

std::vector<int64_t> pad_list(const Case& c) {
  std::vector<int64_t> pads;
  for (int64_t k = 0; k < c.at("dims"); ++k) {
    pads.push_back(c.at("before" + std::to_string(k)));
    pads.push_back(c.at("after" + std::to_string(k)));
  }
  return pads;
}

// cat or stack of the parts; under bf16 autocast on the device the first part
// joins in bf16 (an activation meeting float32 parameters), which cat promotes
// back to float32, differentiably. The reference rounds that part to bf16's
// 8 significant bits instead (`operand`).
Tensor cat_parts(const Case& c, const std::map<std::string, Tensor>& t,
                 const std::function<Tensor(const Tensor&)>& operand) {
  std::vector<Tensor> parts;
  for (const auto& [name, v] : t) parts.push_back(v);  // x, y, z in order
  const std::optional<DType> autocast = autocast_dtype();
  parts[0] = autocast ? parts[0].to(*autocast) : operand(parts[0]);
  return c.at("stack") ? stack(parts, c.at("dim")) : cat(parts, c.at("dim"));
}

// Masks combined every way: comparisons, ^, |, ~, logical_and / logical_not,
// isclose against x shifted by 0.25 where w > 1 (never near its tolerance),
// then mul with a mask and where.
Tensor mask_mix(const Tensor& x, const Tensor& w) {
  const Tensor shifted = add(x.detach(), masked_fill(zeros_like(x.detach()), gt(w, 1.0), 0.25));
  const Tensor m = (gt(x, 0.0) ^ gt(w, 0.5)) | ~isclose(x, shifted);
  const Tensor keep = logical_and(m, logical_not(lt(w, -1.5)));
  return add(mul(keep, x), where(~keep, w, zeros_like(w)));
}

Tensor loss_of(const Case& c, const std::map<std::string, Tensor>& t) {
  const Tensor &x = t.at("x"), &target = t.at("target");
  const auto reduction = static_cast<Reduction>(c.at("reduction"));
  const double beta = c.at("beta_pct") / 100.0;
  switch (c.at("loss")) {
    case 0: return l1_loss(x, target, reduction);
    case 1: return smooth_l1_loss(x, target, reduction, beta);
    case 2: return huber_loss(x, target, reduction, beta);
    case 3: return binary_cross_entropy_with_logits(x, target, {.reduction = reduction});
    case 4:
      return binary_cross_entropy_with_logits(
          x, target, {.reduction = reduction, .weight = t.at("weight"), .pos_weight = t.at("pos_weight")});
    case 5: return binary_cross_entropy(sigmoid(x), target, {.reduction = reduction, .weight = t.at("weight")});
    case 6: return kl_div(log_softmax(x, 1), softmax(target, 1), {.reduction = reduction});
    default:
      return kl_div(log_softmax(x, 1), log_softmax(target, 1), {.reduction = reduction, .log_target = true});
  }
}

Tensor statistic_of(const Case& c, const Tensor& x) {
  const bool keepdim = c.at("keepdim") != 0;
  const Shape dims = c.at("two") ? Shape{c.at("dim"), -1} : Shape{c.at("dim")};
  switch (c.at("stat")) {
    case 0: return var(x, dims, keepdim, c.at("correction"));
    case 1: return std(x, dims, keepdim, c.at("correction"));
    case 2: return logsumexp(x, dims, keepdim);
    case 3: return min(x, c.at("dim"), keepdim).values;
    default: return min(x);
  }
}

// flip over the dims in "dims_mask", then the chunks along "chunk_dim" joined
// in reverse order.
Tensor flip_chunks(const Case& c, const Tensor& x) {
  Shape dims;
  for (int64_t k = 0; k < 4; ++k) {
    if (c.at("dims_mask") >> k & 1) dims.push_back(k);
  }
  std::vector<Tensor> pieces = chunk(flip(x, dims), c.at("chunks"), c.at("chunk_dim"));
  std::reverse(pieces.begin(), pieces.end());
  return cat(pieces, c.at("chunk_dim"));
}

// sin or cos of x, its lower or upper triangle, repeated.
Tensor waves_triangle(const Case& c, const Tensor& x) {
  const Tensor waves = c.at("cos") ? cos(mul(x, 2.0)) : sin(mul(x, 2.0));
  const Tensor part = c.at("lower") ? tril(waves, c.at("diagonal")) : triu(waves, c.at("diagonal"));
  Shape repeats = c.at("lead") ? Shape{2} : Shape{};
  for (int64_t k = 0; k < 4; ++k) repeats.push_back(c.at("repeat" + std::to_string(k)));
  return repeat(part, repeats);
}

// Sort's kinds: sort or topk values, the median along dim, or the k-th value.
Tensor ordered(const Case& c, const Tensor& x) {
  const int64_t dim = c.at("dim");
  switch (c.at("kind")) {
    case 1: return median(x, dim, c.at("descending")).values;
    case 2: return kthvalue(x, std::max<int64_t>(c.at("k"), 1), dim).values;
    default:
      return c.at("topk") ? topk(x, c.at("k"), dim, c.at("descending")).values
                          : sort(x, dim, c.at("descending")).values;
  }
}

// Cumsum's kinds: cumsum, or cumprod or prod of factors in [0.75, 1.25] (no
// zeros: a product's gradient divides by nothing, but long products of normals
// would leave the range the precisions compare in).
Tensor running_total(const Case& c, const Tensor& x) {
  const int64_t dim = c.at("dim");
  switch (c.at("kind")) {
    case 1: return cumprod(tanh(x) * 0.25 + 1.0, dim);
    case 2: return prod(tanh(x) * 0.25 + 1.0, dim, c.at("descending"));
    default: return cumsum(x, dim);
  }
}

// A Scatter case's index, made on the CPU from the case's seed so that every
// device reads the same: int64 in [0, the dim's size) of `sizes`, or for
// scatter (kind 1) each line along dim a prefix of a random permutation, so that
// no place is written twice (which value stays would be the device's choice).
Tensor scatter_index(const Case& c, const Shape& sizes, Device device) {
  Generator gen(case_seed(c.seed, c.index) ^ 0x1d5ull);
  const int64_t dim = c.at("dim"), size = c.at(std::string(1, "NCHW"[dim]));
  if (c.at("kind") != 1) return randint(0, size, sizes, {.dtype = DType::Int64}, &gen).to(device);
  Shape lines = sizes;
  lines[dim] = size;
  return argsort(rand(lines, {.dtype = DType::Float64}, &gen), dim).narrow(dim, 0, sizes[dim]).contiguous().to(device);
}

// Scatter's kinds along "dim", the index "len" long there.
Tensor scattered(const Case& c, const std::map<std::string, Tensor>& t) {
  const Tensor& x = t.at("x");
  const int64_t dim = c.at("dim"), len = c.at("len");
  Shape along = x.sizes();
  along[dim] = len;
  switch (c.at("kind")) {
    case 0: return scatter_add(x, dim, scatter_index(c, along, x.device()), t.at("w"));
    case 1: return scatter(x, dim, scatter_index(c, along, x.device()), t.at("w"));
    case 2: return index_add(x, dim, scatter_index(c, {len}, x.device()), t.at("w"), c.at("alpha_x4") / 4.0);
    case 3: return gather(x, dim, scatter_index(c, along, x.device()));
    default: {
      Generator gen(case_seed(c.seed, c.index) ^ 0x3a5ull);
      return masked_select(x, (rand(x.sizes(), {.dtype = DType::Float64}, &gen) > 0.5).to(x.device()));
    }
  }
}

// One of the math rows on inputs inside its domain (positive for the logarithms
// and rsqrt, inside (-pi/2, pi/2) for tan); sign times x, since sign's gradient is 0.
Tensor math_row(const Case& c, const Tensor& x) {
  const Tensor square = x * x;
  switch (c.at("fn")) {
    case 0: return log1p(square * 0.5);
    case 1: return expm1(x * 0.5);
    case 2: return log2(square + 0.25);
    case 3: return log10(square + 0.25);
    case 4: return tan(tanh(x));
    case 5: return atan(x * 2.0);
    case 6: return erf(x);
    case 7: return rsqrt(square + 0.25);
    default: return sign(x) * x;
  }
}

// vector_norm's ords in the sweep: 0 (a count), p < 1, the common p, and the extremes.
constexpr double kDistanceOrds[] = {0.0, 0.5, 1.0, 2.0, 3.0, std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity()};

Tensor distance_of(const Case& c, const Tensor& x, const Tensor& w) {
  const double ord = kDistanceOrds[c.at("ord")];
  const bool keepdim = c.at("keepdim") != 0;
  switch (c.at("kind")) {
    case 0: {
      Shape dims;
      for (int64_t k = 0; k < 4; ++k) {
        if (c.at("dims_mask") & (1 << k)) dims.push_back(k);
      }
      return vector_norm(x, ord, dims, keepdim);
    }
    case 1: return cosine_similarity(x, w, c.at("dim"));
    default: return pairwise_distance(x, w, ord, 1e-6, keepdim);
  }
}

// One recurrent layer; its output, final h and (LSTM) c in one vector, so
// that the backward reaches the recurrence through all three.
Tensor recurrent_of(const Case& c, const std::map<std::string, Tensor>& t) {
  const auto get = [&t](const std::string& name) { return t.count(name) ? t.at(name) : Tensor(); };
  const RnnSequence s = rnn_layer(static_cast<RnnMode>(c.at("mode")), t.at("x"), {t.at("h0"), get("c0")},
                                  t.at("w_ih"), t.at("w_hh"), get("b_ih"), get("b_hh"), c.at("reverse") != 0);
  std::vector<Tensor> parts{s.output.reshape({-1}), s.state.h.reshape({-1})};
  if (s.state.c.defined()) parts.push_back(s.state.c.reshape({-1}));
  return cat(parts, 0);
}

// The ops after Op::Chain: issue 32's, the norms' and the composites'.
Tensor forward_more(const Case& c, const std::map<std::string, Tensor>& t,
                    const std::function<Tensor(const Tensor&)>& operand) {
  const Tensor& x = t.at("x");
  switch (c.op) {
    case Op::Interpolate: return interpolate(x, interpolate_options(c));
    case Op::Pad:
      return pad(x, pad_list(c), static_cast<PadMode>(c.at("mode")), c.at("value_x4") / 4.0);
    case Op::Abs: return abs(x);
    case Op::Cat: return cat_parts(c, t, operand);
    case Op::Dropout2d: {
      Generator gen(case_seed(c.seed, c.index) ^ 0xd20ull);  // one mask on both runs
      return dropout2d(x, c.at("p_pct") / 100.0, /*training=*/true, &gen);
    }
    case Op::Mask: return mask_mix(x, t.at("w"));
    case Op::Losses: return loss_of(c, t);
    case Op::Statistics: return statistic_of(c, x);
    case Op::Extremum: return c.at("larger") ? maximum(x, t.at("w")) : minimum(x, t.at("w"));
    case Op::Flip: return flip_chunks(c, x);
    case Op::Sort: return ordered(c, x);
    case Op::Cumsum: return running_total(c, x);
    case Op::Triangle: return waves_triangle(c, x);
    case Op::Scatter: return scattered(c, t);
    case Op::Math: return math_row(c, x);
    case Op::Distance: return distance_of(c, x, t.at("w"));
    case Op::Rnn: return recurrent_of(c, t);
    default: break;
  }
  throw ValueError(fmt::format("[parity_sweep] {} is not one of the ops after Op::Chain", op_name(c.op)));
}

// A Conv1d case's pooling of y (N, K, L').
Tensor pooled_1d(const Case& c, const Tensor& y) {
  const Pool1dOptions o{.kernel_size = c.at("pool_kernel"),
                        .stride = c.at("pool_stride"),
                        .padding = c.at("pool_pad"),
                        .ceil_mode = c.at("ceil_mode") != 0,
                        .count_include_pad = c.at("count_include_pad") != 0};
  switch (c.at("pool")) {
    case 1: return max_pool1d(y, o);
    case 2: return avg_pool1d(y, o);
    case 3: return adaptive_avg_pool1d(y, c.at("pool_size"));
    case 4: return adaptive_max_pool1d(y, c.at("pool_size"));
    default: return y;
  }
}

// The op's output from operands already on the run's device and dtype.
Tensor forward(const Case& c, const std::map<std::string, Tensor>& t, const Tensor& target,
               Running* running, const Rounding& rounding) {
  auto operand = [&rounding](const Tensor& v) { return round_to(v, rounding.operand_bits); };
  auto stored = [&rounding](const Tensor& v) { return round_to(v, rounding.storage_bits); };
  auto get = [&t](const std::string& name) {
    auto it = t.find(name);
    return it == t.end() ? Tensor() : it->second;
  };
  const Tensor& x = t.at("x");
  switch (c.op) {
    case Op::Conv2d:
      return stored(conv2d(operand(x), operand(get("weight")), operand(get("bias")),
                           {.stride = {c.at("stride_h"), c.at("stride_w")},
                            .padding = {c.at("pad_h"), c.at("pad_w")},
                            .dilation = {c.at("dilation_h"), c.at("dilation_w")},
                            .groups = c.at("groups")}));
    case Op::Conv1d: {
      // channels-last stands for length-major: x (N, L, C) transposed
      const Tensor x_ncl = c.channels_last ? x.transpose(1, 2).contiguous().transpose(1, 2) : x;
      return pooled_1d(c, stored(conv1d(operand(x_ncl), operand(get("weight")), operand(get("bias")),
                                        {.stride = c.at("stride"),
                                         .padding = c.at("pad"),
                                         .dilation = c.at("dilation"),
                                         .groups = c.at("groups")})));
    }
    case Op::Linear: return stored(linear(operand(x), operand(get("weight")), operand(get("bias"))));
    case Op::BatchNormActivation:
      return batch_norm_activation(x, running->mean, running->var, get("weight"), get("bias"), {},
                                   kernel::kActivationKinds[c.at("activation")], {}, get("residual"));
    case Op::BatchNorm:
      return batch_norm(x, c.at("track") ? running->mean : Tensor(),
                        c.at("track") ? running->var : Tensor(), get("weight"), get("bias"),
                        {.training = c.at("training") != 0});
    case Op::GroupNorm: return group_norm(x, c.at("groups"), get("weight"), get("bias"));
    case Op::InstanceNorm:
      return instance_norm(x, c.at("track") ? running->mean : Tensor(),
                           c.at("track") ? running->var : Tensor(), get("weight"), get("bias"),
                           {.use_input_stats = c.at("input_stats") != 0});
    case Op::Relu: return relu(x);
    case Op::MaxPool: return max_pool2d(x, pool_options(c));
    case Op::AvgPool: return avg_pool2d(x, pool_options(c));
    case Op::Softmax: return softmax(x, 1);
    case Op::LogSoftmax: return log_softmax(x, 1);
    case Op::CrossEntropy:
      return cross_entropy(x, c.at("target") == 1 ? get("probabilities") : target,
                           {.reduction = static_cast<Reduction>(c.at("reduction")),
                            .label_smoothing = c.label_smoothing});
    case Op::Chain: {
      const int64_t pad = c.at("pad");
      Tensor h = stored(conv2d(operand(x), operand(get("conv weight")), operand(get("conv bias")),
                               {.padding = {pad, pad}}));
      h = c.fused ? stored(batch_norm_relu(h, running->mean, running->var, get("bn weight"),
                                           get("bn bias")))
                  : relu(stored(batch_norm(h, running->mean, running->var, get("bn weight"),
                                           get("bn bias"))));
      h = max_pool2d(h, {.kernel_size = {2, 2}});
      h = stored(linear(operand(h.reshape({h.size(0), -1})), operand(get("fc weight")),
                        operand(get("fc bias"))));
      return cross_entropy(h, target);
    }
    default: return forward_more(c, t, operand);
  }
}

struct RunResult {
  Tensor y;
  std::vector<std::pair<std::string, Tensor>> grads;
  Running running;
};

// One run: operands converted to `dtype` on `device` (channels-last where the
// case says and they are 4-D), forward, a backward of sum(y * weights), grads.
RunResult run_once(const Case& c, const Operands& o, Device device, DType dtype,
                   const Rounding& rounding) {
  std::map<std::string, Tensor> t;
  for (const auto& [name, value] : o.tensors) {
    Tensor v = value.to(dtype).to(device);
    if (c.channels_last && v.dim() == 4) v = v.contiguous(MemoryFormat::ChannelsLast);
    v = v.detach();
    v.requires_grad_(true);
    t[name] = v;
  }
  const int64_t channels = c.op == Op::Chain ? c.at("K") : c.ints.count("C") ? c.at("C") : 1;
  Running reference = make_running(c, channels);
  Running running{reference.mean.to(dtype).to(device), reference.var.to(dtype).to(device)};
  Tensor target = o.target.defined() ? o.target.to(device) : Tensor();
  Tensor y = forward(c, t, target, &running, rounding);
  Tensor loss = y;
  if (y.dim() > 0) {
    Generator gen(case_seed(c.seed, c.index) ^ 0xd1ceull);
    Tensor weights = randn(y.sizes(), {.dtype = DType::Float64}, &gen).to(y.dtype()).to(device);
    loss = sum(mul(y, weights));
  }
  loss.backward();
  RunResult r{y.detach().to(DType::Float64).cpu(), {}, {}};
  for (const auto& [name, v] : t) {
    if (v.grad().defined()) r.grads.emplace_back("grad " + name, v.grad().to(DType::Float64).cpu());
  }
  r.running = {running.mean.to(DType::Float64).cpu(), running.var.to(DType::Float64).cpu()};
  return r;
}

double max_abs(const Tensor& t) {
  Tensor c = t.contiguous();
  const double* p = c.data_ptr<double>();
  double m = 0;
  for (int64_t i = 0; i < c.numel(); ++i) m = std::max(m, std::abs(p[i]));
  return m;
}

// The fraction of elements off by more than `tolerance` on the floor's scale.
double outlier_fraction(const Tensor& a, const Tensor& ref, double floor, double tolerance) {
  Tensor ac = a.contiguous(), rc = ref.contiguous();
  const double* pa = ac.data_ptr<double>();
  const double* pr = rc.data_ptr<double>();
  const double scale = std::max(floor, max_abs(ref));
  int64_t outliers = 0;
  for (int64_t i = 0; i < ac.numel(); ++i) {
    outliers += !(std::abs(pa[i] - pr[i]) <= tolerance * scale);
  }
  return ac.numel() == 0 ? 0.0 : static_cast<double>(outliers) / static_cast<double>(ac.numel());
}

// A chain's gradients pass when at most this fraction of their elements is off:
// an activation within rounding of ReLU's 0 or of its pooling window's maximum
// takes the other branch on one side (a decision flip), which moves the
// gradient of the elements that feed it by their full size. A wrong kernel
// moves most elements (the mask bug moved 40-100% of them).
constexpr double kFlipFraction = 0.01;

// The fraction of `grad` one decision flip may move. In a weight gradient
// (output channels first) a flip in output channel k moves all of filter k: with
// few filters that is more than kFlipFraction (seed 3 case 439 on the H100: TF32,
// 32 filters of 4 weights, one flip moved 4 of the 128, while strict fp32 was
// within 6e-7).
double flip_fraction(const std::string& name, const Tensor& grad) {
  const bool weight = name.find("weight") != std::string::npos && grad.dim() >= 2;
  return weight ? std::max(kFlipFraction, 1.0 / static_cast<double>(grad.size(0))) : kFlipFraction;
}

// A device result may be off by this many times what float32 arithmetic on the
// CPU is off by in the same case, scaled to the policy's arithmetic: some
// cases are ill-conditioned in any float32 (gradients that cancel), TF32
// operands carry 13 fewer mantissa bits than float32, and bf16 autocast's
// gradients 16 fewer (the reference rounds the forward as autocast does, not
// the backward).
constexpr double kConditioning = 10;

double roundoff_ratio(Precision precision) {
  switch (precision) {
    case Precision::Tf32: return 8192.0;    // 2^-10 / 2^-23
    case Precision::Bf16: return 65536.0;   // 2^-7 / 2^-23
    case Precision::Fp16: return 8192.0;
    case Precision::StrictFp32: break;
  }
  return 1.0;
}

// One tensor against the reference; `cpu32` is the CPU's float32 result, or
// undefined (the CPU sweep, whose float32 run is the one under test).
void compare(Outcome& out, const std::string& name, const Tensor& a, const Tensor& ref,
             const Tensor& cpu32, double floor, double tolerance, double roundoff,
             bool flips_allowed) {
  const double e = relative_error(a, ref, floor);
  const double allowed =
      cpu32.defined()
          ? std::max(tolerance, kConditioning * roundoff * relative_error(cpu32, ref, floor))
          : tolerance;
  if (e > allowed && flips_allowed && a.sizes() == ref.sizes() &&
      outlier_fraction(a, ref, floor, allowed) <= flip_fraction(name, a)) {
    out.decision_flips = true;
    return;
  }
  if (e / allowed > out.worst_ratio || out.worst_tensor.empty()) {
    out.worst_ratio = std::max(out.worst_ratio, e / allowed);
    out.worst_error = e;
    out.allowed_error = allowed;
    out.worst_tensor = name;
  }
}

// The tensor named `name` in a run's gradients, or undefined.
Tensor grad_named(const RunResult& r, const std::string& name) {
  auto it = std::find_if(r.grads.begin(), r.grads.end(), [&](const auto& g) { return g.first == name; });
  return it == r.grads.end() ? Tensor() : it->second;
}

int64_t fallback_runs() {
#ifdef LOOM_WITH_CUDA
  return cudnn::PlanCache::global().stats().fallback_runs;
#else
  return 0;
#endif
}

std::vector<uint64_t> seeds_from_env(const std::vector<uint64_t>& defaults) {
  const char* text = std::getenv("LOOM_SWEEP_SEEDS");
  if (text == nullptr) return defaults;
  std::vector<uint64_t> seeds;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) seeds.push_back(std::stoull(item));
  return seeds;
}

int64_t int_from_env(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::stoll(text);
}

}  // namespace

double relative_error(const Tensor& a, const Tensor& ref, double floor) {
  if (a.sizes() != ref.sizes()) return INFINITY;
  Tensor ac = a.contiguous(), rc = ref.contiguous();
  const double* pa = ac.data_ptr<double>();
  const double* pr = rc.data_ptr<double>();
  double diff = 0, scale = floor;
  for (int64_t i = 0; i < ac.numel(); ++i) {
    if (!std::isfinite(pa[i]) && std::isfinite(pr[i])) return INFINITY;
    diff = std::max(diff, std::abs(pa[i] - pr[i]));
    scale = std::max(scale, std::abs(pr[i]));
  }
  return diff / scale;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Conv2d: return "conv2d";
    case Op::Conv1d: return "conv1d, 1-D pooling";
    case Op::Linear: return "linear";
    case Op::BatchNorm: return "batch_norm";
    case Op::BatchNormActivation: return "batch_norm_activation";
    case Op::Relu: return "relu";
    case Op::MaxPool: return "max_pool2d";
    case Op::AvgPool: return "avg_pool2d";
    case Op::Softmax: return "softmax";
    case Op::LogSoftmax: return "log_softmax";
    case Op::CrossEntropy: return "cross_entropy";
    case Op::Chain: return "conv-bn-relu-pool-linear-loss";
    case Op::Interpolate: return "interpolate";
    case Op::Pad: return "pad";
    case Op::Abs: return "abs";
    case Op::Cat: return "cat / stack";
    case Op::Dropout2d: return "dropout2d";
    case Op::Mask: return "logical ops, isclose, mul on masks";
    case Op::GroupNorm: return "group_norm";
    case Op::InstanceNorm: return "instance_norm";
    case Op::Losses: return "l1 / smooth_l1 / huber / BCE / kl_div losses";
    case Op::Statistics: return "var / std / logsumexp / min";
    case Op::Extremum: return "maximum / minimum";
    case Op::Flip: return "flip, chunk";
    case Op::Sort: return "sort / topk / median / kthvalue";
    case Op::Cumsum: return "cumsum / cumprod / prod";
    case Op::Triangle: return "sin / cos, tril / triu, repeat";
    case Op::Scatter: return "scatter_add / scatter / index_add / gather / masked_select";
    case Op::Math: return "log1p / expm1 / log2 / log10 / tan / atan / erf / rsqrt / sign";
    case Op::Distance: return "vector_norm / cosine_similarity / pairwise_distance";
    case Op::Rnn: return "rnn_layer (tanh / relu / LSTM / GRU)";
  }
  return "?";
}

std::string Case::describe() const {
  std::string text = fmt::format("seed {} case {}: {} {} {} {} {}{}", seed, index, op_name(op),
                                 float64 ? "float64" : "float32", precision_name(precision),
                                 channels_last ? "channels-last" : "NCHW",
                                 deterministic ? "deterministic" : "nondeterministic",
                                 op == Op::Chain ? (fused ? " fused" : " unfused") : "");
  for (const auto& [name, value] : ints) text += fmt::format(" {}={}", name, value);
  if (op == Op::CrossEntropy) text += fmt::format(" label_smoothing={}", label_smoothing);
  return text;
}

Case make_case(uint64_t seed, int64_t index, const std::vector<Precision>& precisions) {
  Draw d(case_seed(seed, index));
  Case c;
  c.seed = seed;
  c.index = index;
  c.op = kOps[index % std::size(kOps)];  // every op equally often
  c.precision = d.pick(precisions);
  c.deterministic = d.coin();
  c.channels_last = d.coin();
  c.fused = d.coin();
  // What the CPU takes, the GPU takes: float64 too (mixed precision keeps
  // float32 master weights, so not with bf16 autocast).
  c.float64 = c.precision != Precision::Bf16 && d.between(0, 7) == 0;
  draw_op(d, c);
  return c;
}

double tolerance(Precision precision) {
  switch (precision) {
    case Precision::StrictFp32: return 1e-4;
    case Precision::Tf32: return 1e-2;
    case Precision::Bf16:
    case Precision::Fp16: return 3e-2;
  }
  return 0;
}

Outcome run_case(const Case& c, Device device) {
  Outcome out;
  const Operands operands = make_operands(c);
  RunResult reference;
  try {
    reference = run_once(c, operands, Device::cpu(), DType::Float64,
                         device.is_cuda() ? Rounding::of(c.precision) : Rounding{});
  } catch (const std::exception& e) {
    out.failure = fmt::format("the float64 CPU reference failed: {}", e.what());
    return out;
  }
  // The CPU's own float32 error, for the conditioning allowance of device runs.
  RunResult cpu32;
  if (device.is_cuda()) {
    try {
      cpu32 = run_once(c, operands, Device::cpu(), c.float64 ? DType::Float64 : DType::Float32,
                       Rounding{});
    } catch (const std::exception& e) {
      out.failure = fmt::format("the float32 CPU run failed: {}", e.what());
      return out;
    }
  }
  const int64_t fallbacks_before = fallback_runs();
  RunResult result;
  try {
    NumericsGuard policy({.precision = c.precision, .deterministic = c.deterministic});
    const bool mixed = c.precision == Precision::Bf16 && device.is_cuda();
    AutocastGuard autocast(mixed ? std::optional<DType>(DType::BFloat16) : std::nullopt);
    FusionGuard fusion(c.op != Op::Chain || c.fused);
    result = run_once(c, operands, device, c.float64 ? DType::Float64 : DType::Float32, Rounding{});
  } catch (const std::exception& e) {
    out.failure = fmt::format("the {} run failed: {}", device.str(), e.what());
    return out;
  }
  out.fallback = fallback_runs() > fallbacks_before;
  // A tensor 100x smaller than the case's largest is judged on 1% of that
  // scale; in the chain on 10%, since a batch norm makes the gradients of the
  // conv before it cancel: the bias gradient is exactly 0, and each filter's
  // gradient is orthogonal to the filter (the norm ignores its scale).
  double largest = max_abs(reference.y);
  for (const auto& [name, grad] : reference.grads) largest = std::max(largest, max_abs(grad));
  const double floor = std::max(1e-3, (c.op == Op::Chain ? 1e-1 : 1e-2) * largest);
  const double tol = tolerance(c.precision);
  // A max pooling after a rounded conv may pick another maximum of a window (a
  // decision flip), as in the chain.
  const bool max_pooled = c.op == Op::Conv1d && (c.at("pool") == 1 || c.at("pool") == 4);
  const bool flips_allowed = c.op == Op::Chain || max_pooled;
  const bool has_cpu32 = device.is_cuda();
  const double roundoff = roundoff_ratio(c.precision);
  compare(out, "y", result.y, reference.y, has_cpu32 ? cpu32.y : Tensor(), floor, tol, roundoff,
          false);
  for (const auto& [name, grad] : reference.grads) {
    const Tensor got = grad_named(result, name);
    if (!got.defined()) {
      out.failure = fmt::format("the {} run produced no {}", device.str(), name);
      return out;
    }
    compare(out, name, got, grad, has_cpu32 ? grad_named(cpu32, name) : Tensor(), floor, tol,
            roundoff, flips_allowed);
  }
  compare(out, "running_mean", result.running.mean, reference.running.mean,
          has_cpu32 ? cpu32.running.mean : Tensor(), floor, tol, roundoff, false);
  compare(out, "running_var", result.running.var, reference.running.var,
          has_cpu32 ? cpu32.running.var : Tensor(), floor, tol, roundoff, false);
  return out;
}

bool Outcome::passed() const { return failure.empty() && worst_ratio <= 1; }

void Summary::add(const Case& c, const Outcome& outcome, bool passed) {
  Row& row = rows_[{op_name(c.op) + std::string(c.op == Op::Chain ? (c.fused ? " fused" : " unfused") : ""),
                    std::string(precision_name(c.precision))}];
  ++row.cases;
  row.passed += passed;
  row.fallback += outcome.fallback;
  row.flips += passed && outcome.decision_flips;
  row.worst_ratio = std::max(row.worst_ratio, outcome.failure.empty() ? outcome.worst_ratio : INFINITY);
  failures_ += !passed;
}

std::string Summary::table() const {
  std::string out =
      "| op | precision | cases | passed | passed with decision flips | worst error / allowed "
      "| ran on the fallback tier |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& [key, row] : rows_) {
    out += fmt::format("| {} | {} | {} | {} | {} | {:.3g} | {} |\n", key.first, key.second,
                       row.cases, row.passed, row.flips, row.worst_ratio, row.fallback);
  }
  return out;
}

Summary run_sweep(Device device, const std::vector<Precision>& precisions,
                  const std::vector<uint64_t>& default_seeds, int64_t count) {
  Summary summary;
  const int64_t only = int_from_env("LOOM_SWEEP_CASE", -1);
  const int64_t first = only >= 0 ? only : int_from_env("LOOM_SWEEP_FIRST", 0);
  const int64_t n = only >= 0 ? 1 : int_from_env("LOOM_SWEEP_COUNT", count);
  for (uint64_t seed : seeds_from_env(default_seeds)) {
    for (int64_t index = first; index < first + n; ++index) {
      const Case c = make_case(seed, index, precisions);
      const Outcome outcome = run_case(c, device);
      const bool passed = outcome.passed();
      summary.add(c, outcome, passed);
      if (passed) continue;
      std::cout << fmt::format(
          "FAILED {}\n  {}\n  rerun: LOOM_SWEEP_SEEDS={} LOOM_SWEEP_CASE={} <this test binary>\n",
          c.describe(),
          outcome.failure.empty()
              ? fmt::format("{} is off by {:.3g} of its largest value (allowed {:.3g})",
                            outcome.worst_tensor, outcome.worst_error, outcome.allowed_error)
              : outcome.failure,
          seed, index);
    }
  }
  std::cout << summary.table() << std::flush;
  return summary;
}

}  // namespace loom::sweep
