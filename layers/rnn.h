// File: layers/rnn.h
// RNN, LSTM and GRU, as torch.nn's: layers stacked, optionally bidirectional,
// each layer and direction one loom::rnn_layer (core/ops/rnn.h); and the cells
// RNNCell, LSTMCell and GRUCell, one time step each. Parameters carry
// PyTorch's names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, with
// "_reverse" for a second direction; a cell's weight_ih, weight_hh, bias_ih,
// bias_hh), shapes and gate order, and start as PyTorch's, each
// U(-1/sqrt(H), 1/sqrt(H)), so state_dicts move both ways.
//
//   nn::LSTM lstm(32, 64, {.num_layers = 2, .batch_first = true});
//   auto [y, state] = lstm(x, {});  // x (N, L, 32) -> y (N, L, 64); state.h, state.c (2, N, 64)
//   Tensor last = lstm(x).select(1, -1);  // the output alone, from zero states
//
//   nn::GRUCell cell(16, 32);
//   RnnState s;  // zeros at the first step
//   for (const Tensor& x_t : steps) s = cell(x_t, s);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/rnn.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

enum class RNNNonlinearity : uint8_t { Tanh, ReLU };

struct RNNOptions {
  int64_t num_layers = 1;
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;  // nn::RNN's; LSTM and GRU refuse ReLU
  bool bias = true;
  bool batch_first = false;  // input and output (N, L, features); the state stays (layers * D, N, H)
  double dropout = 0.0;      // on every layer's output but the last, in training; in [0, 1)
  bool bidirectional = false;
  // LSTM only: h projected to proj_size < hidden_size features each step (torch.nn.LSTM's weight_hr_l*), the
  // projected h fed back and returned; 0 for none. Runs step by step in differentiable ops.
  int64_t proj_size = 0;
  Generator* generator = nullptr;  // for the initial weights; dropout draws from the default generator
};

// H_out below is proj_size for an LSTM with a projection, else hidden_size H.
struct RNNOutput {
  Tensor output;   // (L, N, D * H_out), (N, L, D * H_out) with batch_first, or (L, D * H_out) unbatched
  RnnState state;  // h (num_layers * D, N, H_out), c (LSTM) (num_layers * D, N, H); without N unbatched
};

// torch.nn.utils.rnn.PackedSequence: the true steps of a batch of sequences
// of different lengths, time-major, the padding left out. data's rows are
// step 0 of every sequence (longest first), then step 1 of those that have
// one, and so on; batch_sizes[t] counts the sequences with a step t.
// pack_padded_sequence and pack_sequence make one, pad_packed_sequence undoes
// it, and RNN, LSTM and GRU take one:
//   nn::PackedSequence p = nn::pack_sequence({a, b, c}, false);  // a (7, F), b (3, F), c (5, F)
//   auto [y, state] = lstm(p);                                     // y packed as p; state.h (D, 3, H_out)
//   auto [padded, lengths] = nn::pad_packed_sequence(y);           // (7, 3, D * H_out), {7, 3, 5}
struct PackedSequence {
  Tensor data;                            // (sum of the lengths, *)
  std::vector<int64_t> batch_sizes;       // one per step, non-increasing
  std::vector<int64_t> sorted_indices;    // the batch entry at each position, longest first; empty: in order
  std::vector<int64_t> unsorted_indices;  // each batch entry's position; empty when sorted_indices is
  // Each sequence's length, in the batch's own order.
  std::vector<int64_t> lengths() const;
  // The same batch with its data on `device` or in `dtype` (differentiable), as PackedSequence.to.
  PackedSequence to(Device device) const;
  PackedSequence to(DType dtype) const;
};

struct PackedRNNOutput {
  PackedSequence output;  // packed as the input, D * H_out features
  RnnState state;         // as RNNOutput's, the batch in its own order
};

class RNNBase : public Module {
 public:
  using Module::operator();
  // input (L, N, input_size), (N, L, input_size) with batch_first, or
  // unbatched (L, input_size); state as RNNOutput's, an undefined h or c
  // meaning zeros. Layer l + 1 reads layer l's output, both directions side by
  // side (forward first); state rows go layer by layer, forward then reverse.
  //
  // `lengths`, for a batch of padded sequences: each entry's true length, N
  // values in [1, L] (empty: every entry runs all L steps). An entry's steps
  // past its length are padding: its output there is zero, its state is the
  // one after its last true step, and the reverse direction starts at that
  // step; what torch.nn gives for pack_padded_sequence(input, lengths,
  // enforce_sorted=False) and pad_packed_sequence(output, total_length=L).
  // The lengths are host values deciding how many steps run, so a captured
  // optim::TrainStep runs a step that passes them eagerly.
  //   auto [y, state] = lstm(x, {}, {5, 3, 7});  // x (7, 3, F): y's rows past each length are zero
  RNNOutput forward(const Tensor& input, const RnnState& state, const std::vector<int64_t>& lengths = {});
  Tensor forward(const Tensor& input) override;  // the output alone, from zero states
  RNNOutput operator()(const Tensor& input, const RnnState& state, const std::vector<int64_t>& lengths = {});
  // A packed batch (batch_first does not apply), as torch.nn's: the same as
  // the padded input with its lengths; the state's batch in its own order.
  PackedRNNOutput forward(const PackedSequence& input, const RnnState& state = {});
  PackedRNNOutput operator()(const PackedSequence& input, const RnnState& state = {});
  void reset_parameters(Generator* generator = nullptr);

  // A parameter by PyTorch's name, "weight_ih_l0", "bias_hh_l1_reverse", ...:
  // kind weight_ih, weight_hh, bias_ih, bias_hh or (with proj_size) weight_hr.
  const Tensor& parameter(int64_t layer, bool reverse, const std::string& kind) const;
  RnnMode mode() const { return mode_; }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t proj_size() const { return options_.proj_size; }
  // The features of h and of each direction's output: proj_size, or hidden_size without a projection.
  int64_t output_size() const { return options_.proj_size > 0 ? options_.proj_size : hidden_size_; }
  int64_t num_layers() const { return options_.num_layers; }
  bool bidirectional() const { return options_.bidirectional; }
  bool batch_first() const { return options_.batch_first; }
  std::string extra_repr() const override;

 protected:
  RNNBase(RnnMode mode, int64_t input_size, int64_t hidden_size, const RNNOptions& options);

 private:
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh, w_hr;  // w_hr: the projection (proj_size, H), undefined without one
  };
  int64_t directions() const { return options_.bidirectional ? 2 : 1; }
  // The given initial state (h or c) as (num_layers * D, N, width); undefined
  // stays undefined (rnn_layer starts from zeros, and an ONNX export leaves it out).
  Tensor initial(const Tensor& given, bool batched, int64_t batch, const char* name) const;
  // The lengths checked against x (L, N, features): N values in [1, L].
  void check_lengths(const std::vector<int64_t>& lengths, bool batched, const Tensor& x) const;

  RnnMode mode_;
  int64_t input_size_;
  int64_t hidden_size_;
  RNNOptions options_;
  std::vector<Weights> weights_;  // layer by layer, forward then reverse
};

class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
};

// torch.nn.utils.rnn.pad_sequence: sequences (L_i, *) of one dtype and
// device with the same trailing sizes, each padded at its end with
// padding_value and stacked into (max L_i, N, *) ((N, max L_i, *) with
// batch_first); differentiable. The L_i are the lengths a recurrent module's
// forward takes for them:
//   Tensor x = nn::pad_sequence({a, b, c});  // a (7, F), b (3, F), c (5, F) -> (7, 3, F)
//   auto [y, state] = lstm(x, {}, {7, 3, 5});
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

// torch.nn.utils.rnn.pack_padded_sequence: input (L, N, *) ((N, L, *) with
// batch_first) and each entry's length, N values in [1, L], non-increasing
// unless enforce_sorted is false (then sorted here, longest first, ties in
// batch order). Differentiable.
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths,
                                    bool batch_first = false, bool enforce_sorted = true);
// torch.nn.utils.rnn.pack_sequence: pad_sequence then pack_padded_sequence.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

struct PaddedSequence {
  Tensor padded;                 // (T, N, *), or (N, T, *) with batch_first
  std::vector<int64_t> lengths;  // each entry's length, in the batch's own order
};
// torch.nn.utils.rnn.pad_packed_sequence: the batch back in its own order,
// padded with padding_value to its longest length or to total_length (at
// least that). Differentiable.
PaddedSequence pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                   double padding_value = 0.0, std::optional<int64_t> total_length = std::nullopt);
// torch.nn.utils.rnn.unpad_sequence: each entry of a padded batch cut to its
// length, (L_i, *); pad_sequence's inverse. unpack_sequence: the same of a
// packed batch. Both differentiable, in the batch's own order.
std::vector<Tensor> unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths,
                                   bool batch_first = false);
std::vector<Tensor> unpack_sequence(const PackedSequence& sequence);

struct RNNCellOptions {
  bool bias = true;
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;  // nn::RNNCell's; the others refuse ReLU
  Generator* generator = nullptr;                        // for the initial weights
};

class RNNCellBase : public Module {
 public:
  using Module::operator();
  // x (N, input_size) or unbatched (input_size); state (N, H) or (H), an
  // undefined h or c meaning zeros. Returns the next state (c for an LSTMCell).
  RnnState forward(const Tensor& x, const RnnState& state);
  Tensor forward(const Tensor& x) override;  // the next h from zero states
  RnnState operator()(const Tensor& x, const RnnState& state);
  void reset_parameters(Generator* generator = nullptr);

  const Tensor& weight_ih() const { return w_ih_; }
  const Tensor& weight_hh() const { return w_hh_; }
  const Tensor& bias_ih() const { return b_ih_; }  // undefined without bias
  const Tensor& bias_hh() const { return b_hh_; }
  RnnMode mode() const { return mode_; }
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  std::string extra_repr() const override;

 protected:
  RNNCellBase(RnnMode mode, int64_t input_size, int64_t hidden_size, const RNNCellOptions& options);

 private:
  // The given state as (N, H); undefined stays undefined (zeros in rnn_layer).
  Tensor initial(const Tensor& given, bool batched, const Tensor& x, const char* name) const;

  RnnMode mode_;
  int64_t input_size_;
  int64_t hidden_size_;
  Tensor w_ih_, w_hh_, b_ih_, b_hh_;
};

class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options = {});
};

class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options = {});
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options = {});
};

}  // namespace loom::nn
