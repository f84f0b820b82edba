// File: core/ops/rnn.cc
// rnn_layer: the input projection as one linear, then the time steps as one
// recorded node (Recurrence): per step a product with W_hh and the step kernel
// (core/cpu/rnn.h, core/cuda/rnn.h), or on a GPU where the layer fits, every
// step in one kernel each way (the faster of the two tiers, timed once per
// shape); either keeps what the backward needs: the
// outputs, and per step the LSTM's gate activations and cell, or the GRU's
// gates and W_hn h + b_hn.
#include "core/ops/rnn.h"

#include <fmt/format.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/cpu/rnn.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/rnn.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/trace.h"

namespace loom {

int64_t rnn_gate_count(RnnMode mode) { return kernel::rnn_gates(mode); }

std::string_view rnn_mode_name(RnnMode mode) {
  switch (mode) {
    case RnnMode::Tanh: return "RNN_TANH";
    case RnnMode::Relu: return "RNN_RELU";
    case RnnMode::Lstm: return "LSTM";
    default: return "GRU";
  }
}

namespace {

struct Dims {
  int64_t steps;   // L
  int64_t batch;   // N
  int64_t hidden;  // H
  int64_t gates;   // G
};

void check_sizes(const Tensor& t, const Shape& expected, std::string_view name, RnnMode mode) {
  LOOM_CHECK(t.defined(), ValueError, "[{}] {} is undefined; expected {}", rnn_mode_name(mode), name,
             shape_str(expected));
  LOOM_CHECK(t.sizes() == expected, ShapeError, "[{}] {} must be {}, got {}", rnn_mode_name(mode), name,
             shape_str(expected), shape_str(t.sizes()));
}

Dims check_operands(RnnMode mode, const Tensor& x, const RnnState& state, const Tensor& w_ih, const Tensor& w_hh,
                    const Tensor& b_ih, const Tensor& b_hh) {
  const std::string_view op = rnn_mode_name(mode);
  check_float_tensor(x, op);
  LOOM_CHECK(x.dim() == 3 && x.size(0) >= 1, ShapeError,
             "[{}] the input must be (L, N, features) with L >= 1, got {}", op, shape_str(x.sizes()));
  LOOM_CHECK(w_hh.defined() && w_hh.dim() == 2, ShapeError, "[{}] w_hh must be (G*H, H), got {}", op,
             w_hh.defined() ? shape_str(w_hh.sizes()) : "undefined");
  const int64_t gates = rnn_gate_count(mode), hidden = w_hh.size(1);
  const Dims d{x.size(0), x.size(1), hidden, gates};
  check_sizes(w_hh, {gates * hidden, hidden}, "w_hh", mode);
  check_sizes(w_ih, {gates * hidden, x.size(2)}, "w_ih (G*H, input features)", mode);
  LOOM_CHECK(b_ih.defined() == b_hh.defined(), ValueError,
             "[{}] b_ih and b_hh must both be given or both be undefined", op);
  if (b_ih.defined()) {
    check_sizes(b_ih, {gates * hidden}, "b_ih", mode);
    check_sizes(b_hh, {gates * hidden}, "b_hh", mode);
  }
  if (state.h.defined()) check_sizes(state.h, {d.batch, hidden}, "the hidden state h (N, H)", mode);
  if (mode == RnnMode::Lstm) {
    if (state.c.defined()) check_sizes(state.c, {d.batch, hidden}, "the cell state c (N, H)", mode);
  } else {
    LOOM_CHECK(!state.c.defined(), ValueError, "[{}] takes no cell state c; only an LSTM has one", op);
  }
  return d;
}

// The state with zeros (N, H) in x's dtype and device where h or an LSTM's c was not given.
RnnState zeros_where_undefined(RnnMode mode, const Tensor& x, const RnnState& state, const Dims& d) {
  TensorOptions options = x.options();
  options.requires_grad = false;
  const auto or_zeros = [&](const Tensor& t) { return t.defined() ? t : zeros({d.batch, d.hidden}, options); };
  return {or_zeros(state.h), mode == RnnMode::Lstm ? or_zeros(state.c) : Tensor()};
}

// The GPU's two tiers for a layer's steps (cuda::KernelChoice's names).
constexpr std::string_view kWholeRun = "run", kStepByStep = "steps";

// t converted to `dtype` when it is defined.
Tensor in_dtype(const Tensor& t, DType dtype) {
  return !t.defined() || t.dtype() == dtype ? t : t.to(dtype);
}

// The time steps of one layer and direction, forward and backward. run()
// computes with grad mode off into `packed_` (L, N, H), with c_n as an extra
// row L for an LSTM; the node recorded on it calls backward(). Every view a
// step kernel sees is dense (N, columns).
class Recurrence {
 public:
  Recurrence(RnnMode mode, bool reverse, const Dims& d) : mode_(mode), reverse_(reverse), d_(d) {}

  Tensor run(const Tensor& gates_x, const RnnState& state, const Tensor& w_hh, const Tensor& b_hh);
  // Gradients of gates_x, h0, c0, w_hh and b_hh.
  std::vector<Tensor> backward(const Tensor& dpacked) const;
  std::vector<Tensor> saved() const;

 private:
  int64_t time(int64_t k) const { return reverse_ ? d_.steps - 1 - k : k; }  // the k-th step's time
  bool first(int64_t t) const { return t == time(0); }
  int64_t before(int64_t t) const { return reverse_ ? t + 1 : t - 1; }
  Tensor h_before(int64_t t) const { return first(t) ? h0_ : out_.select(0, before(t)); }
  Tensor c_before(int64_t t) const { return first(t) ? c0_ : cells_.select(0, before(t)); }
  // What the step kernels read as `prev`: c before the step (LSTM) or h (GRU).
  Tensor prev(int64_t t) const {
    if (mode_ == RnnMode::Lstm) return c_before(t);
    return mode_ == RnnMode::Gru ? h_before(t) : Tensor();
  }
  // The views every step kernel of time t shares.
  kernel::RnnStep step_views(int64_t t) const;
  // Every step's previous hidden state, in time order (L, N, H).
  Tensor previous_hs() const;
  // The views of the whole run, for the one-kernel tier (cuda::rnn_run_fits).
  kernel::RnnRun run_views() const;
  // Whether the steps run in one kernel: on a GPU where the layer fits, the
  // faster tier, raced once per shape (forward and backward on scratch
  // gradients) by cuda::KernelChoice; LOOM_RNN_KERNEL=run or steps forces one.
  bool whole_run_chosen(const Tensor& gates_x);
  // The forward in the tier whole_run_ names.
  void forward(const Tensor& gates_x);
  // The forward one step at a time: a product with W_hh and the step kernel each.
  void steps_forward(const Tensor& gates_x);
  // The backward's operands: dy (L rows of output gradients, then c_n's for an
  // LSTM), and what it fills: dgx, dgh (dgx itself but for a GRU) and dc.
  struct Gradients {
    Tensor dy, dgx, dgh, dc;
  };
  Gradients gradients_for(const Tensor& dy) const;
  // h0's gradient, step by step or in one kernel.
  Tensor steps_backward(const Gradients& g) const;
  Tensor run_backward(const Gradients& g) const;

  RnnMode mode_;
  bool reverse_;
  Dims d_;
  DType h_dtype_ = DType::Float32, c_dtype_ = DType::Float32, w_dtype_ = DType::Float32;
  bool whole_run_ = false;  // every step in one kernel each way (a GPU, a layer that fits)
  Tensor w_hh_, b_hh_;    // in the computation's dtype (gates_x's)
  Tensor h0_, c0_;        // likewise, dense
  Tensor out_;            // (L, N, H), detached from packed_
  Tensor gates_;          // LSTM: i, f, g, o after their activations; GRU: r, z, n (L, N, G*H)
  Tensor cells_;          // LSTM: c after each step (L, N, H)
  Tensor hidden_n_;       // GRU: W_hn h + b_hn of each step (L, N, H)
};

Strided view_or_none(const Tensor& t) { return t.defined() ? t.strided() : Strided{}; }

kernel::RnnStep Recurrence::step_views(int64_t t) const {
  kernel::RnnStep s;
  s.mode = mode_;
  s.hidden = d_.hidden;
  s.prev = view_or_none(prev(t));
  s.gates = view_or_none(gates_.defined() ? gates_.select(0, t) : Tensor());
  const Tensor& aux = cells_.defined() ? cells_ : hidden_n_;
  s.aux = view_or_none(aux.defined() ? aux.select(0, t) : Tensor());
  s.h = out_.select(0, t).strided();
  return s;
}

Tensor Recurrence::run(const Tensor& gates_x_in, const RnnState& state, const Tensor& w_hh, const Tensor& b_hh) {
  NoGradGuard no_grad;
  const Tensor gates_x = gates_x_in.contiguous();
  const DType dtype = gates_x.dtype();
  h_dtype_ = state.h.dtype();
  w_dtype_ = w_hh.dtype();
  w_hh_ = in_dtype(w_hh, dtype).detach().contiguous();
  b_hh_ = b_hh.defined() ? in_dtype(b_hh, dtype).detach().contiguous() : Tensor();
  h0_ = in_dtype(state.h, dtype).detach().contiguous();
  const int64_t L = d_.steps, N = d_.batch, H = d_.hidden;
  TensorOptions options = gates_x.options();
  options.requires_grad = false;
  const bool lstm = mode_ == RnnMode::Lstm;
  Tensor packed = empty({L + (lstm ? 1 : 0), N, H}, options);
  out_ = packed.slice(0, 0, L).detach();
  if (lstm) {
    c_dtype_ = state.c.dtype();
    c0_ = in_dtype(state.c, dtype).detach().contiguous();
    cells_ = empty({L, N, H}, options);
  }
  if (d_.gates > 1) gates_ = empty({L, N, d_.gates * H}, options);
  if (mode_ == RnnMode::Gru) hidden_n_ = empty({L, N, H}, options);
  whole_run_ = whole_run_chosen(gates_x);
  forward(gates_x);
  if (lstm) packed.select(0, L).copy_(cells_.select(0, time(L - 1)));
  return packed;
}

bool Recurrence::whole_run_chosen(const Tensor& gates_x) {
  const Device device = gates_x.device();
  if (!device.is_cuda()) return false;
  const DType dtype = gates_x.dtype();
  return on_device(device, [&] {
    if (!cuda::rnn_run_fits(mode_, d_.batch, d_.hidden, dtype)) return false;
    static cuda::KernelChoice choice("LOOM_RNN_KERNEL");
    // The tiers' costs both grow with L, so one race serves every length.
    const std::string key =
        fmt::format("{} {} N {} H {}", rnn_mode_name(mode_), dtype_name(dtype), d_.batch, d_.hidden);
    const auto tier = [&](bool whole) {
      return [this, &gates_x, whole] {
        whole_run_ = whole;
        forward(gates_x);
        const int64_t rows = d_.steps + (mode_ == RnnMode::Lstm ? 1 : 0);
        const Gradients scratch = gradients_for(zeros({rows, d_.batch, d_.hidden}, out_.options()));
        whole ? run_backward(scratch) : steps_backward(scratch);
        return true;
      };
    };
    const std::string pick = choice.choose(key, {std::string(kWholeRun), std::string(kStepByStep)},
                                           [&] { return cuda::CandidateRuns{tier(true), tier(false)}; });
    return pick == kWholeRun;
  });
}

void Recurrence::forward(const Tensor& gates_x) {
  if (!whole_run_) {
    steps_forward(gates_x);
    return;
  }
  kernel::RnnRun views = run_views();
  views.gx = gates_x.strided();
  on_device(gates_x.device(), [&] { cuda::rnn_run_forward(views); });
}

void Recurrence::steps_forward(const Tensor& gates_x) {
  for (int64_t k = 0; k < d_.steps; ++k) {
    const int64_t t = time(k);
    const Tensor gh = linear(h_before(t), w_hh_).contiguous();  // the kernel adds b_hh
    kernel::RnnStep s = step_views(t);
    s.gx = gates_x.select(0, t).strided();
    s.gh = gh.strided();
    s.bias = view_or_none(b_hh_);
    LOOM_KERNEL(gates_x, rnn_step_forward, s);
  }
}

kernel::RnnRun Recurrence::run_views() const {
  kernel::RnnRun run;
  run.mode = mode_;
  run.reverse = reverse_;
  run.w_hh = w_hh_.strided();
  run.bias = view_or_none(b_hh_);
  run.h0 = h0_.strided();
  run.c0 = view_or_none(c0_);
  run.gates = view_or_none(gates_);
  run.aux = view_or_none(cells_.defined() ? cells_ : hidden_n_);
  run.out = out_.strided();
  return run;
}

std::vector<Tensor> Recurrence::saved() const {
  std::vector<Tensor> kept;
  for (const Tensor& t : {out_, gates_, cells_, hidden_n_}) {
    if (t.defined()) kept.push_back(t);
  }
  return kept;
}

Tensor Recurrence::previous_hs() const {
  const int64_t L = d_.steps;
  const Tensor h0 = h0_.unsqueeze(0);
  if (L == 1) return h0;
  return reverse_ ? cat({out_.slice(0, 1, L), h0}, 0) : cat({h0, out_.slice(0, 0, L - 1)}, 0);
}

std::vector<Tensor> Recurrence::backward(const Tensor& dpacked) const {
  const int64_t L = d_.steps, N = d_.batch, H = d_.hidden, GH = d_.gates * d_.hidden;
  const bool lstm = mode_ == RnnMode::Lstm;
  const Gradients g = gradients_for(in_dtype(dpacked, out_.dtype()).contiguous());
  const Tensor dh = whole_run_ ? run_backward(g) : steps_backward(g);
  const Tensor flat = g.dgh.reshape({L * N, GH});
  const Tensor dw = matmul(flat.t(), previous_hs().reshape({L * N, H}));
  const Tensor db = b_hh_.defined() ? sum(flat, {0}) : Tensor();
  return {g.dgx, in_dtype(dh, h_dtype_), lstm ? in_dtype(g.dc, c_dtype_) : Tensor(), in_dtype(dw, w_dtype_),
          in_dtype(db, w_dtype_)};
}

Recurrence::Gradients Recurrence::gradients_for(const Tensor& dy) const {
  const int64_t L = d_.steps, GH = d_.gates * d_.hidden;
  const TensorOptions options = out_.options();
  Gradients g;
  g.dy = dy;
  g.dgx = empty({L, d_.batch, GH}, options);
  g.dgh = mode_ == RnnMode::Gru ? empty({L, d_.batch, GH}, options) : g.dgx;
  g.dc = mode_ == RnnMode::Lstm ? dy.select(0, L).clone() : Tensor();  // c's gradient, carried back in place
  return g;
}

Tensor Recurrence::steps_backward(const Gradients& g) const {
  const bool gru = mode_ == RnnMode::Gru;
  const TensorOptions options = out_.options();
  const Tensor direct = gru ? empty({d_.batch, d_.hidden}, options) : Tensor();  // dh z
  Tensor dh = zeros({d_.batch, d_.hidden}, options);
  for (int64_t k = d_.steps - 1; k >= 0; --k) {
    const int64_t t = time(k);
    kernel::RnnStep s = step_views(t);
    s.dh = dh.strided();
    s.dy = g.dy.select(0, t).strided();
    s.dc = view_or_none(g.dc);
    s.dgx = g.dgx.select(0, t).strided();
    s.dgh = view_or_none(gru ? g.dgh.select(0, t) : Tensor());
    s.dh_direct = view_or_none(direct);
    LOOM_KERNEL(dh, rnn_step_backward, s);
    dh = matmul(g.dgh.select(0, t), w_hh_);
    if (gru) dh = add(dh, direct);
  }
  return dh;
}

Tensor Recurrence::run_backward(const Gradients& g) const {
  const Tensor dh = empty({d_.batch, d_.hidden}, out_.options());
  kernel::RnnRun views = run_views();
  views.dy = g.dy.slice(0, 0, d_.steps).strided();
  views.dc = view_or_none(g.dc);
  views.dgx = g.dgx.strided();
  views.dgh = view_or_none(mode_ == RnnMode::Gru ? g.dgh : Tensor());
  views.dh0 = dh.strided();
  on_device(dh.device(), [&] { cuda::rnn_run_backward(views); });
  return dh;
}

}  // namespace

RnnSequence rnn_layer(RnnMode mode, const Tensor& x, const RnnState& state, const Tensor& w_ih, const Tensor& w_hh,
                      const Tensor& b_ih, const Tensor& b_hh, bool reverse) {
  trace::OpScope trace("rnn_layer");
  const Dims d = check_operands(mode, x, state, w_ih, w_hh, b_ih, b_hh);
  const RnnState first = zeros_where_undefined(mode, x, state, d);
  const Tensor gates_x = linear(x, w_ih, b_ih);  // every step's input projection in one product
  auto recurrence = std::make_shared<Recurrence>(mode, reverse, d);
  Tensor packed = recurrence->run(gates_x, first, w_hh, b_hh);
  if (needs_grad({gates_x, first.h, first.c, w_hh, b_hh})) {
    record(
        std::string(rnn_mode_name(mode)), {gates_x, first.h, first.c, w_hh, b_hh}, packed,
        [recurrence](const Tensor& dpacked) { return recurrence->backward(dpacked); }, recurrence->saved());
  }
  const int64_t L = d.steps;
  RnnSequence result;
  result.output = mode == RnnMode::Lstm ? packed.slice(0, 0, L) : packed;
  result.state.h = packed.select(0, reverse ? 0 : L - 1);
  if (mode == RnnMode::Lstm) result.state.c = packed.select(0, L);
  if (trace.recording()) {
    std::vector<Tensor> outputs{result.output, result.state.h};
    if (result.state.c.defined()) outputs.push_back(result.state.c);
    trace.record({x, state.h, state.c, w_ih, w_hh, b_ih, b_hh}, outputs,
                 {{"mode", std::string(rnn_mode_name(mode))}, {"reverse", static_cast<int64_t>(reverse)}});
  }
  return result;
}

RnnState rnn_cell(RnnMode mode, const Tensor& x, const RnnState& state, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh) {
  LOOM_CHECK(x.defined() && x.dim() == 2, ShapeError, "[{}] a cell's input must be (N, features), got {}",
             rnn_mode_name(mode), x.defined() ? shape_str(x.sizes()) : "undefined");
  return rnn_layer(mode, x.unsqueeze(0), state, w_ih, w_hh, b_ih, b_hh).state;
}

}  // namespace loom
