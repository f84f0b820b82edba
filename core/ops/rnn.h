// File: core/ops/rnn.h
// The recurrences of torch.nn.RNN, LSTM and GRU, one layer in one direction at
// a time (layers/rnn.h stacks them). The input's projection x W_ih^T + b_ih is
// one matrix product for the whole sequence; the time steps run as one
// recorded op whose backward walks the steps in reverse with explicit kernels
// (one product per step, the weight gradient one product for the sequence),
// as PyTorch's cuDNN and fused cells do, instead of a graph of per-step views
// whose gradients would each materialize the whole sequence.
//
// Gates are stacked in the weights' rows in PyTorch's order, so state_dicts
// move both ways:
//   Tanh / Relu  h' = act(W_ih x + b_ih + W_hh h + b_hh)                  (1 gate)
//   Lstm         i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the sum   (4 gates)
//                c' = f * c + i * g,  h' = o * tanh(c')
//   Gru          r, z = sigmoid(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})
//                n = tanh(W_in x + b_in + r * (W_hn h + b_hn))            (3 gates)
//                h' = n + z * (h - n)   (PyTorch's (1 - z) * n + z * h)
//
//   RnnSequence out = rnn_layer(RnnMode::Lstm, x, {h0, c0}, w_ih, w_hh, b_ih, b_hh);
//   // x (L, N, in) -> out.output (L, N, H), out.state.h and .c (N, H)
#pragma once

#include <cstdint>
#include <string_view>

#include "core/kernel/rnn.h"  // RnnMode
#include "core/tensor.h"

namespace loom {

// The gates stacked in the weights' rows: 1, 1, 4, 3.
int64_t rnn_gate_count(RnnMode mode);
// "RNN_TANH", "RNN_RELU", "LSTM", "GRU" (PyTorch's mode names).
std::string_view rnn_mode_name(RnnMode mode);

// A recurrent state: h, and c for an LSTM (undefined otherwise).
struct RnnState {
  Tensor h;
  Tensor c;
};

struct RnnSequence {
  Tensor output;   // (L, N, H): the hidden state after each time step, in time order
  RnnState state;  // the state after the last step taken (time 0 when reversed)
};

// One layer in one direction: x (L, N, in) floating with L >= 1, state.h (and
// state.c for an LSTM) (N, H), or undefined for zeros (which an ONNX export
// then leaves out rather than fixing their batch size); w_ih (G*H, in), w_hh
// (G*H, H), b_ih and b_hh (G*H) or both undefined. `reverse` runs the steps from time L - 1 down to 0
// (a bidirectional layer's second direction). Differentiable in x, the state
// and the weights. Mismatched shapes throw ShapeError naming the operand.
RnnSequence rnn_layer(RnnMode mode, const Tensor& x, const RnnState& state, const Tensor& w_ih,
                      const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, bool reverse = false);

// One time step, as torch's rnn_tanh_cell, rnn_relu_cell, lstm_cell and
// gru_cell: x (N, in), the state (N, H); rnn_layer over a sequence of one.
RnnState rnn_cell(RnnMode mode, const Tensor& x, const RnnState& state, const Tensor& w_ih, const Tensor& w_hh,
                  const Tensor& b_ih, const Tensor& b_hh);

}  // namespace loom
