// File: tests/layers/rnn_test.cc
// RNN, LSTM, GRU and their cells against PyTorch's equations written out in
// doubles, step by step, over random configurations (mode, layers,
// directions, batch_first, bias, unbatched input, given or zero states); the
// recurrence's hand-written backward by gradcheck and against the same
// network unrolled in Loom's differentiable ops; PyTorch's parameter names,
// shapes, initialisation and reprs; the errors; a user's sequence classifier
// learning a task.
#include "layers/rnn.h"

#include <doctest/doctest.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/embedding.h"
#include "layers/linear.h"
#include "optim/sgd.h"
#include "tests/layers/module_testing.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

double sigmoid_of(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// One layer and direction's weights, read by PyTorch's names.
struct RefWeights {
  std::vector<double> w_ih, w_hh, b_ih, b_hh, w_hr;  // row-major; biases empty without bias, w_hr without proj_size
  int64_t in = 0;
};

// PyTorch's equations for one step of one sample: h (and c) updated in place;
// c has hidden_size values, h proj_size with an LSTM's projection.
void ref_step(RnnMode mode, const RefWeights& w, const double* x, std::vector<double>& h, std::vector<double>& c) {
  const int64_t H = static_cast<int64_t>(c.size()), P = static_cast<int64_t>(h.size()), G = rnn_gate_count(mode);
  std::vector<double> m(H);  // an LSTM's o * tanh(c), projected into h
  std::vector<double> gi(G * H), gh(G * H);
  for (int64_t r = 0; r < G * H; ++r) {
    gi[r] = w.b_ih.empty() ? 0.0 : w.b_ih[r];
    gh[r] = w.b_hh.empty() ? 0.0 : w.b_hh[r];
    for (int64_t k = 0; k < w.in; ++k) gi[r] += w.w_ih[r * w.in + k] * x[k];
    for (int64_t k = 0; k < P; ++k) gh[r] += w.w_hh[r * P + k] * h[k];
  }
  for (int64_t j = 0; j < H; ++j) {
    if (mode == RnnMode::Tanh || mode == RnnMode::Relu) {
      const double a = gi[j] + gh[j];
      h[j] = mode == RnnMode::Tanh ? std::tanh(a) : std::max(a, 0.0);
    } else if (mode == RnnMode::Lstm) {
      const double i = sigmoid_of(gi[j] + gh[j]), f = sigmoid_of(gi[H + j] + gh[H + j]);
      const double g = std::tanh(gi[2 * H + j] + gh[2 * H + j]), o = sigmoid_of(gi[3 * H + j] + gh[3 * H + j]);
      c[j] = f * c[j] + i * g;
      m[j] = o * std::tanh(c[j]);
    } else {
      const double r = sigmoid_of(gi[j] + gh[j]), z = sigmoid_of(gi[H + j] + gh[H + j]);
      const double n = std::tanh(gi[2 * H + j] + r * gh[2 * H + j]);
      h[j] = (1.0 - z) * n + z * h[j];
    }
  }
  if (mode != RnnMode::Lstm) return;
  for (int64_t p = 0; p < P; ++p) {
    h[p] = w.w_hr.empty() ? m[p] : 0.0;
    for (int64_t j = 0; !w.w_hr.empty() && j < H; ++j) h[p] += w.w_hr[p * H + j] * m[j];
  }
}

struct Config {
  RnnMode mode = RnnMode::Tanh;
  int64_t layers = 1, L = 1, N = 1, in = 1, H = 1, proj = 0;
  bool bidirectional = false, batch_first = false, bias = true, unbatched = false, given_state = false;

  int64_t P() const { return proj > 0 ? proj : H; }  // h's and each direction's output features
  std::string str() const {
    return fmt::format("{} layers={} L={} N={} in={} H={} proj={} bi={} batch_first={} bias={} unbatched={} state={}",
                       rnn_mode_name(mode), layers, L, N, in, H, proj, bidirectional, batch_first, bias, unbatched,
                       given_state);
  }
};

std::shared_ptr<nn::RNNBase> make_module(const Config& c, Generator* gen) {
  auto m = testing::make_recurrent(c.mode, c.in, c.H,
                                   {.num_layers = c.layers, .bias = c.bias, .batch_first = c.batch_first,
                                    .bidirectional = c.bidirectional, .proj_size = c.proj, .generator = gen});
  m->to(DType::Float64);
  return m;
}

RefWeights ref_weights(const nn::Module& m, int64_t layer, int dir, int64_t in) {
  const std::string suffix = fmt::format("_l{}{}", layer, dir == 1 ? "_reverse" : "");
  RefWeights w;
  w.in = in;
  for (const auto& [name, p] : m.named_parameters()) {
    if (name == "weight_ih" + suffix) w.w_ih = p.to_vector<double>();
    if (name == "weight_hh" + suffix) w.w_hh = p.to_vector<double>();
    if (name == "bias_ih" + suffix) w.b_ih = p.to_vector<double>();
    if (name == "bias_hh" + suffix) w.b_hh = p.to_vector<double>();
    if (name == "weight_hr" + suffix) w.w_hr = p.to_vector<double>();
  }
  return w;
}

struct RefResult {
  std::vector<double> output;  // (L, N, D*P)
  std::vector<double> h, c;    // (layers*D, N, P), (layers*D, N, H)
};

// The stacked network in doubles: x (L, N, in) and states h (layers*D, N, P), c (layers*D, N, H) flat.
RefResult reference(const Config& cfg, const nn::Module& m, std::vector<double> x, const std::vector<double>& h0,
                    const std::vector<double>& c0) {
  const int64_t D = cfg.bidirectional ? 2 : 1, H = cfg.H, P = cfg.P(), L = cfg.L, N = cfg.N;
  RefResult out;
  out.h.assign(cfg.layers * D * N * P, 0.0);
  out.c.assign(cfg.layers * D * N * H, 0.0);
  int64_t in = cfg.in;
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    std::vector<double> y(L * N * D * P);
    for (int dir = 0; dir < D; ++dir) {
      const RefWeights w = ref_weights(m, layer, dir, in);
      const int64_t row = layer * D + dir;
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> h(h0.begin() + (row * N + n) * P, h0.begin() + (row * N + n + 1) * P);
        std::vector<double> c(c0.begin() + (row * N + n) * H, c0.begin() + (row * N + n + 1) * H);
        for (int64_t k = 0; k < L; ++k) {
          const int64_t t = dir == 1 ? L - 1 - k : k;
          ref_step(cfg.mode, w, &x[(t * N + n) * in], h, c);
          std::copy(h.begin(), h.end(), y.begin() + (t * N + n) * D * P + dir * P);
        }
        std::copy(h.begin(), h.end(), out.h.begin() + (row * N + n) * P);
        std::copy(c.begin(), c.end(), out.c.begin() + (row * N + n) * H);
      }
    }
    x = y;
    in = D * P;
  }
  out.output = x;
  return out;
}

Config random_config(Generator& gen, int index) {
  const auto pick = [&](int64_t lo, int64_t hi) {
    return static_cast<int64_t>(randint(lo, hi + 1, {1}, {}, &gen).item());
  };
  Config c;
  c.mode = static_cast<RnnMode>(index % 4);
  c.layers = pick(1, 3);
  c.L = pick(1, 6);
  c.in = pick(1, 5);
  c.H = pick(1, 5);
  c.bidirectional = pick(0, 1) == 1;
  c.batch_first = pick(0, 1) == 1;
  c.bias = pick(0, 3) != 0;
  c.unbatched = pick(0, 4) == 0;
  c.N = c.unbatched ? 1 : pick(1, 4);
  c.given_state = pick(0, 1) == 1;
  if (c.mode == RnnMode::Lstm && c.H >= 2 && pick(0, 1) == 1) c.proj = pick(1, c.H - 1);
  return c;
}

TEST_CASE("RNN, LSTM and GRU compute PyTorch's equations over random configurations") {
  Generator gen(1201);
  for (int index = 0; index < 64; ++index) {
    const Config cfg = random_config(gen, index);
    CAPTURE(cfg.str());
    auto m = make_module(cfg, &gen);
    const int64_t D = cfg.bidirectional ? 2 : 1, S = cfg.layers * D;
    const Tensor x = randn({cfg.L, cfg.N, cfg.in}, kF64, &gen);
    const Tensor h0 = randn({S, cfg.N, cfg.P()}, kF64, &gen), c0 = randn({S, cfg.N, cfg.H}, kF64, &gen);
    const bool lstm = cfg.mode == RnnMode::Lstm;
    RnnState state;
    if (cfg.given_state) {
      state.h = cfg.unbatched ? h0.select(1, 0) : h0;
      if (lstm) state.c = cfg.unbatched ? c0.select(1, 0) : c0;
    }
    const Tensor input = cfg.unbatched ? x.select(1, 0) : cfg.batch_first ? x.transpose(0, 1).contiguous() : x;
    const nn::RNNOutput got = (*m)(input, state);
    const RefResult ref = reference(cfg, *m, x.to_vector<double>(),
                                    (cfg.given_state ? h0 : zeros_like(h0)).to_vector<double>(),
                                    (cfg.given_state && lstm ? c0 : zeros_like(c0)).to_vector<double>());
    const Shape out_sizes{cfg.L, cfg.N, D * cfg.P()}, state_sizes{S, cfg.N, cfg.P()}, c_sizes{S, cfg.N, cfg.H};
    Tensor output = cfg.unbatched ? got.output.unsqueeze(1) : cfg.batch_first ? got.output.transpose(0, 1) : got.output;
    REQUIRE(output.sizes() == out_sizes);
    CHECK_CLOSE(output, tensor(ref.output, out_sizes, kF64), 1e-12, 1e-12);
    const Tensor h = cfg.unbatched ? got.state.h.unsqueeze(1) : got.state.h;
    REQUIRE(h.sizes() == state_sizes);
    CHECK_CLOSE(h, tensor(ref.h, state_sizes, kF64), 1e-12, 1e-12);
    CHECK(got.state.c.defined() == lstm);
    if (lstm) {
      const Tensor c = cfg.unbatched ? got.state.c.unsqueeze(1) : got.state.c;
      CHECK_CLOSE(c, tensor(ref.c, c_sizes, kF64), 1e-12, 1e-12);
    }
  }
}

// rnn_layer's inputs in float64, all requiring grad.
struct LayerInputs {
  std::vector<Tensor> tensors;  // x, h0, c0 (LSTM) or undefined, w_ih, w_hh, b_ih, b_hh
};

LayerInputs layer_inputs(RnnMode mode, int64_t L, int64_t N, int64_t in, int64_t H, Generator& gen) {
  const int64_t G = rnn_gate_count(mode);
  const auto draw = [&](const Shape& sizes) { return mul(randn(sizes, kF64, &gen), 0.7).requires_grad_(true); };
  return {{draw({L, N, in}), draw({N, H}), mode == RnnMode::Lstm ? draw({N, H}) : Tensor(), draw({G * H, in}),
           draw({G * H, H}), draw({G * H}), draw({G * H})}};
}

TEST_CASE("rnn_layer's backward passes gradcheck in every mode and direction, through output and state") {
  Generator gen(1202);
  for (RnnMode mode : {RnnMode::Tanh, RnnMode::Relu, RnnMode::Lstm, RnnMode::Gru}) {
    for (bool reverse : {false, true}) {
      CAPTURE(std::string(rnn_mode_name(mode)));
      CAPTURE(reverse);
      const LayerInputs in = layer_inputs(mode, 4, 2, 3, 3, gen);
      std::vector<Tensor> given;
      for (const Tensor& t : in.tensors) {
        if (t.defined()) given.push_back(t);
      }
      const bool lstm = mode == RnnMode::Lstm;
      const auto fn = [mode, reverse, lstm](const std::vector<Tensor>& v) {
        const RnnState state{v[1], lstm ? v[2] : Tensor()};
        const size_t w = lstm ? 3 : 2;
        const RnnSequence s = rnn_layer(mode, v[0], state, v[w], v[w + 1], v[w + 2], v[w + 3], reverse);
        std::vector<Tensor> parts{s.output.reshape({-1}), mul(s.state.h, 1.5).reshape({-1})};
        if (lstm) parts.push_back(mul(s.state.c, -0.5).reshape({-1}));
        return cat(parts, 0);
      };
      const GradcheckResult result = gradcheck(fn, given);
      CHECK_MESSAGE(result.ok, result.message);
    }
  }
  // Without biases, and a cell (one step) of each gated mode.
  const LayerInputs in = layer_inputs(RnnMode::Gru, 3, 2, 2, 2, gen);
  const auto no_bias = [](const std::vector<Tensor>& v) {
    return rnn_layer(RnnMode::Gru, v[0], {v[1], Tensor()}, v[2], v[3], Tensor(), Tensor()).output;
  };
  const GradcheckResult result = gradcheck(no_bias, {in.tensors[0], in.tensors[1], in.tensors[3], in.tensors[4]});
  CHECK_MESSAGE(result.ok, result.message);
  const LayerInputs cell = layer_inputs(RnnMode::Lstm, 1, 3, 2, 2, gen);
  const auto lstm_cell = [](const std::vector<Tensor>& v) {
    const RnnState s = rnn_cell(RnnMode::Lstm, v[0].select(0, 0), {v[1], v[2]}, v[3], v[4], v[5], v[6]);
    return add(s.h, mul(s.c, 2.0));
  };
  const GradcheckResult cell_result = gradcheck(lstm_cell, cell.tensors);
  CHECK_MESSAGE(cell_result.ok, cell_result.message);
}

// The same stacked network unrolled in Loom's differentiable ops, one step
// at a time: its gradients are the autograd engine's, not the recurrence's.
Tensor unrolled(const Config& cfg, const nn::RNNBase& m, Tensor x) {
  const int64_t D = cfg.bidirectional ? 2 : 1, H = cfg.H, P = cfg.P();
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    std::vector<Tensor> dirs;
    for (int dir = 0; dir < D; ++dir) {
      const Tensor w_ih = m.parameter(layer, dir == 1, "weight_ih"), w_hh = m.parameter(layer, dir == 1, "weight_hh");
      const Tensor b_ih = m.parameter(layer, dir == 1, "bias_ih"), b_hh = m.parameter(layer, dir == 1, "bias_hh");
      Tensor h = zeros({cfg.N, P}, kF64), c = zeros({cfg.N, H}, kF64);
      std::vector<Tensor> ys(cfg.L);
      for (int64_t k = 0; k < cfg.L; ++k) {
        const int64_t t = dir == 1 ? cfg.L - 1 - k : k;
        const Tensor gi = linear(x.select(0, t), w_ih, b_ih), gh = linear(h, w_hh, b_hh);
        if (cfg.mode == RnnMode::Lstm) {
          const Tensor a = add(gi, gh);
          c = add(mul(sigmoid(a.narrow(1, H, H)), c), mul(sigmoid(a.narrow(1, 0, H)), tanh(a.narrow(1, 2 * H, H))));
          h = mul(sigmoid(a.narrow(1, 3 * H, H)), tanh(c));
          if (cfg.proj > 0) h = linear(h, m.parameter(layer, dir == 1, "weight_hr"), Tensor());
        } else if (cfg.mode == RnnMode::Gru) {
          const Tensor r = sigmoid(add(gi.narrow(1, 0, H), gh.narrow(1, 0, H)));
          const Tensor z = sigmoid(add(gi.narrow(1, H, H), gh.narrow(1, H, H)));
          const Tensor n = tanh(add(gi.narrow(1, 2 * H, H), mul(r, gh.narrow(1, 2 * H, H))));
          h = add(mul(1.0 - z, n), mul(z, h));
        } else {
          h = cfg.mode == RnnMode::Tanh ? tanh(add(gi, gh)) : relu(add(gi, gh));
        }
        ys[t] = h;
      }
      dirs.push_back(stack(ys, 0));
    }
    x = D == 1 ? dirs[0] : cat(dirs, 2);
  }
  return x;
}

TEST_CASE("the modules' gradients equal those of the network unrolled in differentiable ops") {
  Generator gen(1203);
  for (int index = 0; index < 16; ++index) {
    Config cfg = random_config(gen, index);
    cfg.unbatched = cfg.batch_first = cfg.given_state = false;
    cfg.bias = true;
    CAPTURE(cfg.str());
    auto m = make_module(cfg, &gen);
    Tensor x = randn({cfg.L, cfg.N, cfg.in}, kF64, &gen).requires_grad_(true);
    const Tensor weights = randn({cfg.L, cfg.N, (cfg.bidirectional ? 2 : 1) * cfg.P()}, kF64, &gen);
    sum(mul((*m)(x), weights)).backward();
    std::vector<Tensor> grads{x.grad()};
    for (const Tensor& p : m->parameters()) grads.push_back(p.grad());
    x.set_grad(Tensor());
    m->zero_grad();
    sum(mul(unrolled(cfg, *m, x), weights)).backward();
    CHECK_CLOSE(grads[0], x.grad(), 1e-10, 1e-12);
    const std::vector<Tensor> params = m->parameters();
    for (size_t i = 0; i < params.size(); ++i) CHECK_CLOSE(grads[i + 1], params[i].grad(), 1e-10, 1e-12);
  }
}

TEST_CASE("parameter names, shapes and initialisation are PyTorch's; the reprs print as PyTorch's") {
  Generator gen(1204);
  nn::LSTM lstm(10, 20, {.num_layers = 2, .batch_first = true, .dropout = 0.5, .bidirectional = true,
                         .generator = &gen});
  std::vector<std::string> names;
  for (const auto& [name, p] : lstm.named_parameters()) names.push_back(name + " " + shape_str(p.sizes()));
  const std::vector<std::string> expected{
      "weight_ih_l0 (80, 10)",         "weight_hh_l0 (80, 20)",         "bias_ih_l0 (80,)",
      "bias_hh_l0 (80,)",               "weight_ih_l0_reverse (80, 10)", "weight_hh_l0_reverse (80, 20)",
      "bias_ih_l0_reverse (80,)",       "bias_hh_l0_reverse (80,)",       "weight_ih_l1 (80, 40)",
      "weight_hh_l1 (80, 20)",         "bias_ih_l1 (80,)",               "bias_hh_l1 (80,)",
      "weight_ih_l1_reverse (80, 40)", "weight_hh_l1_reverse (80, 20)", "bias_ih_l1_reverse (80,)",
      "bias_hh_l1_reverse (80,)"};
  CHECK(names == expected);
  const double bound = 1.0 / std::sqrt(20.0);
  for (const Tensor& p : lstm.parameters()) {
    CHECK(max(abs(p)).item() <= bound);
    CHECK(max(abs(p)).item() > bound / 2);  // drawn over the whole range, not left at zero
  }
  CHECK(lstm.repr() == "LSTM(10, 20, num_layers=2, batch_first=True, dropout=0.5, bidirectional=True)");
  CHECK(nn::GRU(3, 4, {.bias = false}).repr() == "GRU(3, 4, bias=False)");
  CHECK(nn::RNN(3, 4, {.nonlinearity = nn::RNNNonlinearity::ReLU}).repr() == "RNN(3, 4)");
  CHECK(nn::RNNCell(3, 4, {.nonlinearity = nn::RNNNonlinearity::ReLU}).repr() == "RNNCell(3, 4, nonlinearity=relu)");
  CHECK(nn::LSTMCell(3, 4, {.bias = false}).repr() == "LSTMCell(3, 4, bias=False)");
  nn::GRUCell cell(3, 4);
  std::vector<std::string> cell_names;
  for (const auto& [name, p] : cell.named_parameters()) cell_names.push_back(name + " " + shape_str(p.sizes()));
  CHECK(cell_names == std::vector<std::string>{"weight_ih (12, 3)", "weight_hh (12, 4)", "bias_ih (12,)",
                                               "bias_hh (12,)"});
  nn::LSTM copy(10, 20, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  copy.load_state_dict(lstm.state_dict());
  const Tensor x = randn({2, 3, 10}, {}, &gen);
  lstm.eval();
  copy.eval();
  CHECK_CLOSE(copy(x), lstm(x), 0, 0);
}

TEST_CASE("the cells are one step of their layers, batched or not, and carry the LSTM's cell state") {
  Generator gen(1205);
  for (RnnMode mode : {RnnMode::Tanh, RnnMode::Relu, RnnMode::Lstm, RnnMode::Gru}) {
    CAPTURE(std::string(rnn_mode_name(mode)));
    const nn::RNNCellOptions o{.nonlinearity = mode == RnnMode::Relu ? nn::RNNNonlinearity::ReLU
                                                                     : nn::RNNNonlinearity::Tanh,
                               .generator = &gen};
    std::shared_ptr<nn::RNNCellBase> cell;
    if (mode == RnnMode::Lstm) {
      cell = std::make_shared<nn::LSTMCell>(3, 4, o);
    } else if (mode == RnnMode::Gru) {
      cell = std::make_shared<nn::GRUCell>(3, 4, o);
    } else {
      cell = std::make_shared<nn::RNNCell>(3, 4, o);
    }
    cell->to(DType::Float64);
    const Tensor x = randn({2, 3}, kF64, &gen), h = randn({2, 4}, kF64, &gen), c = randn({2, 4}, kF64, &gen);
    const bool lstm = mode == RnnMode::Lstm;
    const RnnState next = (*cell)(x, {h, lstm ? c : Tensor()});
    const RefWeights w{cell->weight_ih().to_vector<double>(), cell->weight_hh().to_vector<double>(),
                       cell->bias_ih().to_vector<double>(), cell->bias_hh().to_vector<double>(), {}, 3};
    const std::vector<double> xs = x.to_vector<double>(), hs = h.to_vector<double>(), cs = c.to_vector<double>();
    for (int64_t n = 0; n < 2; ++n) {
      std::vector<double> hn(hs.begin() + n * 4, hs.begin() + (n + 1) * 4);
      std::vector<double> cn(cs.begin() + n * 4, cs.begin() + (n + 1) * 4);
      ref_step(mode, w, &xs[n * 3], hn, cn);
      CHECK_CLOSE(next.h.select(0, n), tensor(hn, {4}, kF64), 1e-12, 1e-12);
      if (lstm) CHECK_CLOSE(next.c.select(0, n), tensor(cn, {4}, kF64), 1e-12, 1e-12);
    }
    CHECK(next.c.defined() == lstm);
    const RnnState one = (*cell)(x.select(0, 1), {h.select(0, 1), lstm ? c.select(0, 1) : Tensor()});
    CHECK(one.h.sizes() == Shape{4});
    CHECK_CLOSE(one.h, next.h.select(0, 1), 0, 0);
    CHECK_CLOSE((*cell)(x), (*cell)(x, {}).h, 0, 0);  // zero states
  }
}

TEST_CASE("dropout acts between layers in training only; zero or undefined states equal given zeros") {
  Generator gen(1206);
  nn::GRU gru(3, 5, {.num_layers = 3, .dropout = 0.5, .generator = &gen});
  const Tensor x = randn({4, 2, 3}, {}, &gen);
  gru.eval();
  const Tensor eval_out = gru(x);
  CHECK_CLOSE(gru(x), eval_out, 0, 0);
  CHECK_CLOSE(gru(x, {zeros({3, 2, 5}), Tensor()}).output, eval_out, 0, 0);
  gru.train();
  CHECK(max(abs(sub(gru(x), eval_out))).item() > 1e-3);
  nn::GRU single(3, 5, {.dropout = 0.5, .generator = &gen});  // one layer: nothing between layers
  const Tensor trained = single(x);
  single.eval();
  CHECK_CLOSE(single(x), trained, 0, 0);
  // rnn_layer itself takes an undefined h (and an LSTM's c) as zeros, in its
  // outputs and in the weights' gradients.
  for (RnnMode mode : {RnnMode::Tanh, RnnMode::Relu, RnnMode::Lstm, RnnMode::Gru}) {
    CAPTURE(std::string(rnn_mode_name(mode)));
    const LayerInputs in = layer_inputs(mode, 3, 2, 3, 4, gen);
    const bool lstm = mode == RnnMode::Lstm;
    const auto run = [&](const RnnState& state) {
      const Tensor w_hh = in.tensors[4].detach().requires_grad_(true);
      const RnnSequence s = rnn_layer(mode, in.tensors[0], state, in.tensors[3], w_hh, in.tensors[5],
                                      in.tensors[6], /*reverse=*/true);
      const Tensor last = lstm ? s.state.c : s.state.h;
      const Tensor all = cat({s.output.reshape({-1}), s.state.h.reshape({-1}), last.reshape({-1})}, 0);
      sum(mul(all, all)).backward();
      return std::pair{all.detach(), w_hh.grad()};
    };
    const Tensor zero = zeros({2, 4}, kF64);
    const auto [with_zeros, grad_with_zeros] = run({zero, lstm ? zero : Tensor()});
    const auto [undefined, grad_undefined] = run({});
    CHECK_CLOSE(undefined, with_zeros, 0, 0);
    CHECK_CLOSE(grad_undefined, grad_with_zeros, 0, 0);
    if (lstm) CHECK_CLOSE(run({zero, Tensor()}).first, with_zeros, 0, 0);
  }
}

// Each batch entry's length, random in [1, cfg.L].
std::vector<int64_t> random_lengths(const Config& cfg, Generator& gen) {
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n < cfg.N; ++n) {
    lengths.push_back(static_cast<int64_t>(randint(1, cfg.L + 1, {1}, {}, &gen).item()));
  }
  return lengths;
}

// A random initial state where cfg gives one, else undefined (zeros).
RnnState random_state(const Config& cfg, Generator& gen) {
  const int64_t S = cfg.layers * (cfg.bidirectional ? 2 : 1);
  RnnState state;
  if (cfg.given_state) {
    state.h = randn({S, cfg.N, cfg.P()}, kF64, &gen);
    if (cfg.mode == RnnMode::Lstm) state.c = randn({S, cfg.N, cfg.H}, kF64, &gen);
  }
  return state;
}

// Each entry of a padded batch run alone over its true steps, as torch.nn runs a
// packed batch: the output's rows past each length zero, the state the entry's own.
TEST_CASE("padded sequences with their lengths give each entry's own run, as packed sequences do") {
  Generator gen(1205);
  for (int index = 0; index < 48; ++index) {
    Config cfg = random_config(gen, index);
    cfg.unbatched = false;
    cfg.N = static_cast<int64_t>(randint(1, 5, {1}, {}, &gen).item());
    CAPTURE(cfg.str());
    auto m = make_module(cfg, &gen);
    const int64_t D = cfg.bidirectional ? 2 : 1;
    const std::vector<int64_t> lengths = random_lengths(cfg, gen);
    CAPTURE(fmt::format("lengths {}", fmt::join(lengths, ",")));
    const Tensor x = randn({cfg.L, cfg.N, cfg.in}, kF64, &gen).requires_grad_(true);
    const bool lstm = cfg.mode == RnnMode::Lstm;
    const RnnState state = random_state(cfg, gen);
    const Tensor input = cfg.batch_first ? x.transpose(0, 1) : x;
    const nn::RNNOutput got = (*m)(input, state, lengths);
    const Tensor output = cfg.batch_first ? got.output.transpose(0, 1) : got.output;
    REQUIRE(output.sizes() == Shape{cfg.L, cfg.N, D * cfg.P()});
    for (int64_t n = 0; n < cfg.N; ++n) {
      CAPTURE(n);
      const Tensor alone_x = x.slice(0, 0, lengths[n]).slice(1, n, n + 1);
      RnnState alone_state;
      if (state.h.defined()) alone_state.h = state.h.slice(1, n, n + 1);
      if (state.c.defined()) alone_state.c = state.c.slice(1, n, n + 1);
      const nn::RNNOutput alone = (*m)(cfg.batch_first ? alone_x.transpose(0, 1) : alone_x, alone_state);
      const Tensor alone_out = cfg.batch_first ? alone.output.transpose(0, 1) : alone.output;
      CHECK_CLOSE(output.slice(0, 0, lengths[n]).slice(1, n, n + 1), alone_out, 1e-12, 1e-12);
      if (lengths[n] < cfg.L) CHECK(max(abs(output.slice(0, lengths[n], cfg.L).select(1, n))).item() == 0);
      CHECK_CLOSE(got.state.h.slice(1, n, n + 1), alone.state.h, 1e-12, 1e-12);
      CHECK(got.state.c.defined() == lstm);
      if (lstm) CHECK_CLOSE(got.state.c.slice(1, n, n + 1), alone.state.c, 1e-12, 1e-12);
    }
    // No gradient reaches the padding's inputs.
    (sum(output) + sum(got.state.h)).backward();
    for (int64_t n = 0; n < cfg.N; ++n) {
      if (lengths[n] < cfg.L) CHECK(max(abs(x.grad().slice(0, lengths[n], cfg.L).select(1, n))).item() == 0);
    }
  }
}

TEST_CASE("padded sequences pass float64 gradcheck; full lengths are the plain run; bad lengths are named") {
  Generator gen(1206);
  for (RnnMode mode : {RnnMode::Tanh, RnnMode::Lstm, RnnMode::Gru}) {
    CAPTURE(std::string(rnn_mode_name(mode)));
    auto m = testing::make_recurrent(mode, 3, 2, {.num_layers = 2, .bidirectional = true, .generator = &gen});
    m->to(DType::Float64);
    const Tensor x = mul(randn({4, 3, 3}, kF64, &gen), 0.7).requires_grad_(true);
    const Tensor h0 = mul(randn({4, 3, 2}, kF64, &gen), 0.7).requires_grad_(true);
    const auto fn = [&](const std::vector<Tensor>& v) {
      const nn::RNNOutput out = (*m)(v[0], {v[1], Tensor()}, {2, 4, 1});
      return cat({out.output.reshape({-1}), mul(out.state.h, 1.5).reshape({-1})}, 0);
    };
    const GradcheckResult result = gradcheck(fn, {x, h0});
    CHECK_MESSAGE(result.ok, result.message);
    const nn::RNNOutput full = (*m)(x, {h0, Tensor()}, {4, 4, 4});
    const nn::RNNOutput plain = (*m)(x, {h0, Tensor()});
    CHECK_CLOSE(full.output, plain.output, 1e-12, 1e-12);
    CHECK_CLOSE(full.state.h, plain.state.h, 1e-12, 1e-12);
  }
  nn::GRU gru(4, 3, {.batch_first = true});
  CHECK_THROWS_WITH_FRAGMENT(gru(zeros({2, 5, 4}), {}, {5}), ShapeError,
                             "[GRU] lengths has 1 values for a batch of 2");
  CHECK_THROWS_WITH_FRAGMENT(gru(zeros({2, 5, 4}), {}, {5, 6}), ValueError,
                             "lengths[1] is 6; each length must be in [1, 5]");
  CHECK_THROWS_WITH_FRAGMENT(gru(zeros({2, 5, 4}), {}, {0, 5}), ValueError, "lengths[0] is 0");
  CHECK_THROWS_WITH_FRAGMENT(gru(zeros({5, 4}), {}, {5}), ValueError, "the input is unbatched");
}

TEST_CASE("pad_sequence stacks sequences of different lengths, padded at their ends, for a recurrent module") {
  const Tensor a = tensor({1, 2, 3, 4, 5, 6}, {3, 2}, kF64).requires_grad_(true);
  const Tensor b = tensor({7, 8}, {1, 2}, kF64).requires_grad_(true);
  const Tensor c = tensor({9, 10, 11, 12}, {2, 2}, kF64).requires_grad_(true);
  const Tensor x = nn::pad_sequence({a, b, c});
  REQUIRE(x.sizes() == Shape{3, 3, 2});
  CHECK(testing::values(x) == std::vector<double>{1, 2, 7, 8, 9, 10, 3, 4, 0, 0, 11, 12, 5, 6, 0, 0, 0, 0});
  const Tensor first = nn::pad_sequence({a, b, c}, /*batch_first=*/true, -1.0);
  REQUIRE(first.sizes() == Shape{3, 3, 2});
  CHECK(testing::values(first) == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1, -1, 9, 10, 11, 12, -1, -1});
  sum(mul(x, x)).backward();
  CHECK(testing::values(b.grad()) == std::vector<double>{14, 16});
  CHECK(testing::values(nn::pad_sequence({tensor({1, 2}, {2})})) == std::vector<double>{1, 2});
  // With the lengths, an LSTM over the padded batch gives each sequence's own final state.
  Generator gen(1207);
  nn::LSTM lstm(2, 3, {.bidirectional = true, .generator = &gen});
  lstm.to(DType::Float64);
  const nn::RNNOutput out = lstm(x, {}, {3, 1, 2});
  const nn::RNNOutput alone = lstm(c.unsqueeze(1), {});
  CHECK_CLOSE(out.state.h.slice(1, 2, 3), alone.state.h, 1e-12, 1e-12);
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_sequence({}), ValueError, "[pad_sequence] needs at least one sequence");
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_sequence({a, zeros({2, 3}, kF64)}), ShapeError,
                             "sequence 0 is (3, 2), 1 is (2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_sequence({a, zeros({2, 2})}), TypeError, "sequence 1 is float32 on cpu");
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_sequence({a, zeros({}, kF64)}), ShapeError, "sequence 1 must be (L, *)");
}

// The rows a packed batch holds, walked from PyTorch's description (each step
// t, the entries with a step t, longest first, ties in batch order), as
// (t, n) pairs.
std::vector<std::pair<int64_t, int64_t>> packed_order(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> order;
  for (int64_t longest = *std::max_element(lengths.begin(), lengths.end()); longest >= 1; --longest) {
    for (size_t n = 0; n < lengths.size(); ++n) {
      if (lengths[n] == longest) order.push_back(static_cast<int64_t>(n));
    }
  }
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (int64_t t = 0; t < lengths[order[0]]; ++t) {
    for (const int64_t n : order) {
      if (lengths[n] > t) rows.emplace_back(t, n);
    }
  }
  return rows;
}

TEST_CASE("pack_sequence and pack_padded_sequence lay out the steps as torch.nn.utils.rnn does") {
  // PyTorch's documented example: data [1, 4, 6, 2, 5, 3], batch_sizes [3, 2, 1].
  const nn::PackedSequence docs = nn::pack_sequence({tensor({1, 2, 3}, {3}, kF64), tensor({4, 5}, {2}, kF64),
                                                     tensor({6}, {1}, kF64)});
  CHECK(testing::values(docs.data) == std::vector<double>{1, 4, 6, 2, 5, 3});
  CHECK(docs.batch_sizes == std::vector<int64_t>{3, 2, 1});
  CHECK(docs.sorted_indices.empty());
  CHECK(docs.lengths() == std::vector<int64_t>{3, 2, 1});
  // Unsorted lengths, sorted here: x[t][n] = 10 t + n.
  const Tensor x = tensor({0, 1, 2, 10, 11, 12, 20, 21, 22}, {3, 3}, kF64);
  const nn::PackedSequence p = nn::pack_padded_sequence(x, {2, 3, 1}, false, /*enforce_sorted=*/false);
  CHECK(testing::values(p.data) == std::vector<double>{1, 0, 2, 11, 10, 21});
  CHECK(p.batch_sizes == std::vector<int64_t>{3, 2, 1});
  CHECK(p.sorted_indices == std::vector<int64_t>{1, 0, 2});
  CHECK(p.unsorted_indices == std::vector<int64_t>{1, 0, 2});
  CHECK(p.lengths() == std::vector<int64_t>{2, 3, 1});
  const auto [back, lengths] = nn::pad_packed_sequence(p, /*batch_first=*/true, -1.0, 4);
  CHECK(back.sizes() == Shape{3, 4});
  CHECK(testing::values(back) == std::vector<double>{0, 10, -1, -1, 1, 11, 21, -1, 2, -1, -1, -1});
  CHECK(lengths == std::vector<int64_t>{2, 3, 1});
  // unpack_sequence and unpad_sequence give the sequences back, in the batch's order.
  const std::vector<Tensor> unpacked = nn::unpack_sequence(p);
  REQUIRE(unpacked.size() == 3);
  CHECK(testing::values(unpacked[0]) == std::vector<double>{0, 10});
  CHECK(testing::values(unpacked[1]) == std::vector<double>{1, 11, 21});
  CHECK(testing::values(unpacked[2]) == std::vector<double>{2});
  const nn::PackedSequence single = p.to(DType::Float32);
  CHECK(single.data.dtype() == DType::Float32);
  CHECK(single.sorted_indices == p.sorted_indices);
  CHECK(testing::values(nn::pad_packed_sequence(single).padded) == testing::values(nn::pad_packed_sequence(p).padded));
}

TEST_CASE("unpad_sequence cuts a padded batch back into its sequences, pad_sequence's inverse, with gradients") {
  Generator gen(1211);
  const Tensor a = randn({4, 2}, kF64, &gen).requires_grad_(true), c = randn({3, 2}, kF64, &gen).requires_grad_(true);
  Tensor b = randn({1, 2}, kF64, &gen).requires_grad_(true);
  for (const bool batch_first : {false, true}) {
    CAPTURE(batch_first);
    const Tensor padded = nn::pad_sequence({a, b, c}, batch_first);
    const std::vector<Tensor> back = nn::unpad_sequence(padded, {4, 1, 3}, batch_first);
    REQUIRE(back.size() == 3);
    CHECK_CLOSE(back[0], a, 0.0, 0.0);
    CHECK_CLOSE(back[1], b, 0.0, 0.0);
    CHECK_CLOSE(back[2], c, 0.0, 0.0);
    b.set_grad(Tensor());
    sum(mul(back[1], back[1])).backward();
    CHECK_CLOSE(b.grad(), mul(b, 2.0), 0.0, 0.0);
  }
  CHECK_THROWS_WITH_FRAGMENT(nn::unpad_sequence(zeros({4, 3, 2}), {4, 1}), ShapeError,
                             "lengths has 2 values for a batch of 3 sequences");
  CHECK_THROWS_WITH_FRAGMENT(nn::unpad_sequence(zeros({4, 3, 2}), {4, 1, 5}), ValueError,
                             "lengths[2] is 5; each length must be in [0, 4]");
}

TEST_CASE("pad_packed_sequence undoes pack_padded_sequence over random batches, and both pass gradients") {
  Generator gen(1208);
  for (int index = 0; index < 40; ++index) {
    const auto draw = [&](int64_t low, int64_t high) {
      return static_cast<int64_t>(randint(low, high, {1}, {}, &gen).item());
    };
    const int64_t T = draw(1, 6), N = draw(1, 5);
    Shape trailing;
    for (int64_t d = draw(0, 3); d > 0; --d) trailing.push_back(draw(1, 4));
    const bool batch_first = draw(0, 2) == 1, sorted = draw(0, 2) == 1;
    std::vector<int64_t> lengths;
    for (int64_t n = 0; n < N; ++n) lengths.push_back(draw(1, T + 1));
    if (sorted) std::sort(lengths.rbegin(), lengths.rend());
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const int64_t total = longest + draw(0, 3);
    CAPTURE(fmt::format("T={} N={} trailing={} batch_first={} sorted={} lengths={} total={}", T, N,
                        fmt::join(trailing, "x"), batch_first, sorted, fmt::join(lengths, ","), total));
    Shape shape{T, N};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    const Tensor x = randn(shape, kF64, &gen).requires_grad_(true);
    const nn::PackedSequence p =
        nn::pack_padded_sequence(batch_first ? x.transpose(0, 1) : x, lengths, batch_first, sorted);
    const auto rows = packed_order(lengths);
    REQUIRE(p.data.size(0) == static_cast<int64_t>(rows.size()));
    CHECK(p.lengths() == lengths);
    for (size_t r = 0; r < rows.size(); ++r) {
      CHECK_CLOSE(p.data.select(0, static_cast<int64_t>(r)), x.select(0, rows[r].first).select(0, rows[r].second),
                  0.0, 0.0);
    }
    const auto [padded, back] = nn::pad_packed_sequence(p, batch_first, 0.5, total);
    CHECK(back == lengths);
    const Tensor y = batch_first ? padded.transpose(0, 1) : padded;
    REQUIRE(y.size(0) == total);
    for (int64_t n = 0; n < N; ++n) {
      CHECK_CLOSE(y.slice(0, 0, lengths[n]).select(1, n), x.slice(0, 0, lengths[n]).select(1, n), 0.0, 0.0);
      if (lengths[n] < total) CHECK(max(abs(sub(y.slice(0, lengths[n], total).select(1, n), 0.5))).item() == 0);
    }
    // The gradient reaches each true step once and no padding.
    const Tensor w = randn(y.sizes(), kF64, &gen);
    sum(mul(y, w)).backward();
    for (int64_t n = 0; n < N; ++n) {
      CHECK_CLOSE(x.grad().slice(0, 0, lengths[n]).select(1, n), w.slice(0, 0, lengths[n]).select(1, n), 0.0, 0.0);
      if (lengths[n] < T) CHECK(max(abs(x.grad().slice(0, lengths[n], T).select(1, n))).item() == 0);
    }
  }
  const Tensor x = randn({4, 3, 2}, kF64, &gen).requires_grad_(true);
  const auto fn = [](const std::vector<Tensor>& v) {
    return nn::pad_packed_sequence(nn::pack_padded_sequence(v[0], {2, 4, 1}, false, false)).padded;
  };
  const GradcheckResult result = gradcheck(fn, {x});
  CHECK_MESSAGE(result.ok, result.message);
}

TEST_CASE("RNN, LSTM and GRU take packed sequences: the padded run with its lengths, packed again") {
  Generator gen(1209);
  for (int index = 0; index < 24; ++index) {
    Config cfg = random_config(gen, index);
    cfg.unbatched = false;
    CAPTURE(cfg.str());
    auto m = make_module(cfg, &gen);
    const int64_t D = cfg.bidirectional ? 2 : 1;
    const std::vector<int64_t> lengths = random_lengths(cfg, gen);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const Tensor x = randn({longest, cfg.N, cfg.in}, kF64, &gen);
    const Tensor input = cfg.batch_first ? x.transpose(0, 1) : x;
    const RnnState state = random_state(cfg, gen);
    const nn::PackedSequence packed = nn::pack_padded_sequence(input, lengths, cfg.batch_first, false);
    const nn::PackedRNNOutput got = (*m)(packed, state);
    const nn::RNNOutput padded = (*m)(input, state, lengths);
    CHECK(got.output.batch_sizes == packed.batch_sizes);
    CHECK(got.output.sorted_indices == packed.sorted_indices);
    CHECK(got.output.data.sizes() == Shape{packed.data.size(0), D * cfg.P()});
    CHECK_CLOSE(nn::pad_packed_sequence(got.output, cfg.batch_first).padded, padded.output, 0.0, 0.0);
    CHECK_CLOSE(got.state.h, padded.state.h, 0.0, 0.0);
    if (state.c.defined()) CHECK_CLOSE(got.state.c, padded.state.c, 0.0, 0.0);
  }
}

TEST_CASE("packing refuses bad lengths, orders and packed batches with the values named") {
  const Tensor x = zeros({3, 2, 4});
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(x, {1, 3}), ValueError,
                             "lengths [1, 3] are not sorted longest first; sort the batch so, or pass enforce_sorted");
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(x, {3}), ShapeError, "lengths has 1 values for a batch of 2");
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(x, {3, 0}), ValueError, "lengths[1] is 0");
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(x, {4, 3}, false, false), ValueError,
                             "lengths[0] is 4; each length must be in [1, 3]");
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(zeros({3}), {3}), ShapeError, "at least two dims, got (3,)");
  CHECK_THROWS_WITH_FRAGMENT(nn::pack_padded_sequence(zeros({3, 0, 4}), {}), ShapeError,
                             "input (3, 0, 4) holds no sequences");
  const nn::PackedSequence p = nn::pack_padded_sequence(x, {3, 2});
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_packed_sequence(p, false, 0.0, 2), ValueError,
                             "total_length is 2, shorter than the longest sequence (3 steps)");
  nn::PackedSequence rising = p;
  rising.batch_sizes = {1, 2, 2};
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_packed_sequence(rising), ValueError,
                             "batch_sizes must be non-increasing values >= 1, got [1, 2, 2]");
  nn::PackedSequence short_data = p;
  short_data.data = zeros({4, 4});
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_packed_sequence(short_data), ShapeError, "needs 5 rows");
  nn::PackedSequence bad_order = p;
  bad_order.sorted_indices = {0, 0};
  bad_order.unsorted_indices = {0, 1};
  CHECK_THROWS_WITH_FRAGMENT(nn::pad_packed_sequence(bad_order), ValueError,
                             "sorted_indices [0, 0] and unsorted_indices [0, 1] must both be empty");
  nn::PackedSequence short_order = p;
  short_order.sorted_indices = {1};
  short_order.unsorted_indices = {0};
  CHECK_THROWS_WITH_FRAGMENT(short_order.lengths(), ValueError,
                             "[PackedSequence::lengths] sorted_indices [1] and unsorted_indices [0] must both be empty");
  nn::LSTM lstm(5, 2);
  CHECK_THROWS_WITH_FRAGMENT(lstm(p), ShapeError, "[LSTM] input has 4 features in its last dim");
  CHECK_THROWS_WITH_FRAGMENT(lstm(nn::pack_sequence({zeros({2, 5, 1})})), ShapeError,
                             "[LSTM] a packed input's data must be (sum of the lengths, 5), got (2, 5, 1)");
}

TEST_CASE("an LSTM's proj_size: PyTorch's parameters, repr and shapes, gradcheck with lengths, errors named") {
  Generator gen(1210);
  nn::LSTM lstm(4, 6, {.num_layers = 2, .bidirectional = true, .proj_size = 3, .generator = &gen});
  std::vector<std::string> names;
  for (const auto& [name, p] : lstm.named_parameters()) names.push_back(name + " " + shape_str(p.sizes()));
  CHECK(names[0] == "weight_ih_l0 (24, 4)");
  CHECK(names[1] == "weight_hh_l0 (24, 3)");
  CHECK(names[4] == "weight_hr_l0 (3, 6)");
  CHECK(names[9] == "weight_hr_l0_reverse (3, 6)");
  CHECK(names[10] == "weight_ih_l1 (24, 6)");
  CHECK(names.size() == 20);
  CHECK(lstm.parameter(1, true, "weight_hr").sizes() == Shape{3, 6});
  CHECK(max(abs(lstm.parameter(0, false, "weight_hr"))).item() <= 1.0 / std::sqrt(6.0));
  CHECK(lstm.extra_repr() == "4, 6, proj_size=3, num_layers=2, bidirectional=True");
  CHECK(lstm.output_size() == 3);
  const nn::RNNOutput out = lstm(zeros({5, 2, 4}), {});
  CHECK(out.output.sizes() == Shape{5, 2, 6});
  CHECK(out.state.h.sizes() == Shape{4, 2, 3});
  CHECK(out.state.c.sizes() == Shape{4, 2, 6});
  lstm.to(DType::Float64);
  const Tensor x = mul(randn({4, 3, 4}, kF64, &gen), 0.7).requires_grad_(true);
  const Tensor h0 = mul(randn({4, 3, 3}, kF64, &gen), 0.7).requires_grad_(true);
  const Tensor c0 = mul(randn({4, 3, 6}, kF64, &gen), 0.7).requires_grad_(true);
  const auto fn = [&](const std::vector<Tensor>& v) {
    const nn::RNNOutput o = lstm(v[0], {v[1], v[2]}, {2, 4, 1});
    return cat({o.output.reshape({-1}), mul(o.state.h, 1.5).reshape({-1}), o.state.c.reshape({-1})}, 0);
  };
  const GradcheckResult result = gradcheck(fn, {x, h0, c0});
  CHECK_MESSAGE(result.ok, result.message);
  CHECK_THROWS_WITH_FRAGMENT(lstm(x, {zeros({4, 3, 6}, kF64), Tensor()}), ShapeError,
                             "the initial state h must be (4, 3, 3) (num_layers * directions, batch, proj_size)");
  CHECK_THROWS_WITH_FRAGMENT(nn::GRU(4, 6, {.proj_size = 2}), ValueError,
                             "[GRU] proj_size is an LSTM's option only, got 2");
  CHECK_THROWS_WITH_FRAGMENT(nn::LSTM(4, 6, {.proj_size = 6}), ValueError,
                             "[LSTM] proj_size must be in [0, hidden_size) = [0, 6), got 6");
  CHECK_THROWS_WITH_FRAGMENT(nn::LSTM(4, 6, {.proj_size = -1}), ValueError, "got -1");
  CHECK_THROWS_WITH_FRAGMENT(nn::LSTM(4, 6).parameter(0, false, "weight_hr"), ValueError,
                             "(weight_hr with a proj_size), got 'weight_hr'");
}

TEST_CASE("bad shapes, states and options are refused with the values named") {
  nn::LSTM lstm(4, 3, {.num_layers = 2});
  CHECK_THROWS_WITH_FRAGMENT(lstm(zeros({5, 2, 6})), ShapeError, "input_size is 4");
  CHECK_THROWS_WITH_FRAGMENT(lstm(zeros({5})), ShapeError, "(L, N, features)");
  CHECK_THROWS_WITH_FRAGMENT(lstm(zeros({5, 2, 4}), {zeros({1, 2, 3}), Tensor()}), ShapeError, "(2, 2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(lstm(zeros({5, 4}), {zeros({2, 1, 3}), Tensor()}), ShapeError, "(2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(lstm(zeros({0, 2, 4})), ShapeError, "L >= 1");
  nn::GRU gru(4, 3);
  CHECK_THROWS_WITH_FRAGMENT(gru(zeros({5, 2, 4}), {Tensor(), zeros({1, 2, 3})}), ValueError, "only an LSTM");
  CHECK_THROWS_WITH_FRAGMENT(nn::LSTM(4, 3, {.nonlinearity = nn::RNNNonlinearity::ReLU}), ValueError,
                             "[LSTM] nonlinearity applies to RNN");
  CHECK_THROWS_WITH_FRAGMENT(nn::GRU(4, 3, {.dropout = 1.0}), ValueError, "[GRU] dropout must be in [0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(nn::RNN(4, 3, {.num_layers = 0}), ValueError, "num_layers");
  CHECK_THROWS_WITH_FRAGMENT(nn::RNN(0, 3), ValueError, "[RNN] input_size and hidden_size must be positive");
  CHECK_THROWS_WITH_FRAGMENT(lstm.parameter(2, false, "weight_ih"), IndexError, "no layer 2");
  CHECK_THROWS_WITH_FRAGMENT(lstm.parameter(0, false, "weight"), ValueError, "weight_ih");
  nn::LSTMCell cell(4, 3);
  CHECK_THROWS_WITH_FRAGMENT(cell(zeros({2, 5})), ShapeError, "(N, 4)");
  CHECK_THROWS_WITH_FRAGMENT(cell(zeros({2, 4}), {zeros({3, 3}), Tensor()}), ShapeError, "(2, 3)");
  const Tensor w = zeros({12, 4});
  CHECK_THROWS_WITH_FRAGMENT(rnn_layer(RnnMode::Tanh, zeros({2, 1, 5}), {zeros({1, 12})}, w, zeros({12, 12}),
                                       Tensor(), Tensor()),
                             ShapeError, "w_ih");
  CHECK_THROWS_WITH_FRAGMENT(rnn_layer(RnnMode::Lstm, zeros({2, 1, 4}), {zeros({1, 3}), zeros({2, 3})}, w,
                                       zeros({12, 3}), Tensor(), Tensor()),
                             ShapeError, "the cell state c (N, H) must be (1, 3), got (2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(rnn_layer(RnnMode::Tanh, zeros({2, 1, 4}), {zeros({1, 3})}, zeros({3, 4}),
                                       zeros({3, 3}), zeros({3}), Tensor()),
                             ValueError, "both be given");
}

// A sequence classifier as a user writes one: embedding, LSTM, the last
// step's output to a linear layer.
class SequenceClassifier : public nn::Module {
 public:
  explicit SequenceClassifier(Generator* gen) {
    embed_ = register_module("embed", std::make_shared<nn::Embedding>(4, 8));
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(
                                        8, 16, nn::RNNOptions{.batch_first = true, .generator = gen}));
    head_ = register_module("head", std::make_shared<nn::Linear>(16, 2));
  }
  Tensor forward(const Tensor& tokens) override {
    const nn::RNNOutput out = (*lstm_)((*embed_)(tokens), {});
    return (*head_)(out.state.h.select(0, 0));
  }

 private:
  std::shared_ptr<nn::Embedding> embed_;
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> head_;
};

TEST_CASE("a user's LSTM classifier learns whether a sequence's first token is 0") {
  Generator gen(1207);
  SequenceClassifier net(&gen);
  CHECK(net.repr().find("(lstm): LSTM(8, 16, batch_first=True)") != std::string::npos);
  optim::SGD sgd(net.parameters(), {.lr = 0.5, .momentum = 0.9});
  const Tensor tokens = randint(0, 4, {64, 7}, {.dtype = DType::Int64}, &gen);
  const Tensor labels = eq(tokens.select(1, 0), 0.0).to(DType::Int64);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 120; ++step) {
    sgd.zero_grad();
    const Tensor loss = cross_entropy(net(tokens), labels);
    loss.backward();
    sgd.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.1 * first);  // the first token must travel through every step to the last
}

}  // namespace
}  // namespace loom
