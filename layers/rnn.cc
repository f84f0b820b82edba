// File: layers/rnn.cc
// The recurrent modules: shapes checked here, the arithmetic in
// loom::rnn_layer; a cell is a layer over a sequence of one step.
#include "layers/rnn.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/activation.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/pad.h"
#include "core/ops/shape_ops.h"
#include "layers/init.h"
#include "layers/repr.h"

namespace loom::nn {

namespace {

RnnMode checked_mode(RnnMode mode, RNNNonlinearity nonlinearity, std::string_view who) {
  if (mode != RnnMode::Tanh) {
    LOOM_CHECK(nonlinearity == RNNNonlinearity::Tanh, ValueError,
               "[{}] nonlinearity applies to RNN and RNNCell only; {} has its own gates", who, who);
    return mode;
  }
  return nonlinearity == RNNNonlinearity::ReLU ? RnnMode::Relu : RnnMode::Tanh;
}

void check_sizes(int64_t input_size, int64_t hidden_size, std::string_view who) {
  LOOM_CHECK(input_size > 0 && hidden_size > 0, ValueError,
             "[{}] input_size and hidden_size must be positive, got {} and {}", who, input_size, hidden_size);
}

// PyTorch's initialisation of every recurrent parameter.
void init_uniform(const std::vector<Tensor>& parameters, int64_t hidden_size, Generator* generator) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : parameters) {
    if (p.defined()) init::uniform_(p, -bound, bound, generator);
  }
}

// The class's name while its constructor runs, when type_name() still answers the base's.
std::string_view class_name(RnnMode mode, bool cell) {
  if (mode == RnnMode::Lstm) return cell ? "LSTMCell" : "LSTM";
  if (mode == RnnMode::Gru) return cell ? "GRUCell" : "GRU";
  return cell ? "RNNCell" : "RNN";
}

std::string shape_of(const Tensor& t) { return t.defined() ? shape_str(t.sizes()) : "undefined"; }

// One length per sequence of a batch of `batch`, each in [shortest, steps].
void check_lengths(const std::vector<int64_t>& lengths, int64_t steps, int64_t batch, int64_t shortest,
                   std::string_view who) {
  LOOM_CHECK(static_cast<int64_t>(lengths.size()) == batch, ShapeError,
             "[{}] lengths has {} values for a batch of {} sequences", who, lengths.size(), batch);
  for (size_t n = 0; n < lengths.size(); ++n) {
    LOOM_CHECK(lengths[n] >= shortest && lengths[n] <= steps, ValueError,
               "[{}] lengths[{}] is {}; each length must be in [{}, {}], the input's number of steps", who, n,
               lengths[n], shortest, steps);
  }
}

// A batch of padded sequences (RNNBase::forward's lengths) on the input's device.
// Built once per call: every layer and direction reads the same ends and masks.
struct Padding {
  std::vector<int64_t> ends;  // the distinct lengths, ascending: where a chunk of steps ends
  std::vector<Tensor> ends_here;  // per end, (N, 1) Bool: lengths[n] == that end
  Tensor padding;   // (L, N, 1) Bool: t >= lengths[n]
  Tensor reversal;  // (L * N) Int64: the row that row t * N + n of the time-major input takes when reversed,
                    // (lengths[n] - 1 - t) * N + n inside the length, itself past it
};

Padding padding_of(const std::vector<int64_t>& lengths, int64_t steps, Device device) {
  const auto batch = static_cast<int64_t>(lengths.size());
  std::vector<double> padding(steps * batch), reversal(steps * batch);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t n = 0; n < batch; ++n) {
      const bool inside = t < lengths[n];
      padding[t * batch + n] = inside ? 0.0 : 1.0;
      reversal[t * batch + n] = static_cast<double>((inside ? lengths[n] - 1 - t : t) * batch + n);
    }
  }
  Padding p{.padding = tensor(padding, {steps, batch, 1}, {.dtype = DType::Bool, .device = device}),
            .reversal = tensor(reversal, {steps * batch}, {.dtype = DType::Int64, .device = device})};
  p.ends = lengths;
  std::sort(p.ends.begin(), p.ends.end());
  p.ends.erase(std::unique(p.ends.begin(), p.ends.end()), p.ends.end());
  for (const int64_t end : p.ends) {
    std::vector<double> here;
    for (const int64_t length : lengths) here.push_back(length == end ? 1.0 : 0.0);
    p.ends_here.push_back(tensor(here, {batch, 1}, {.dtype = DType::Bool, .device = device}));
  }
  return p;
}

// x (L, N, F) with each entry's true steps in reverse order, its padding in place: its own inverse.
Tensor reversed_within(const Tensor& x, const Padding& p) {
  const int64_t steps = x.size(0), batch = x.size(1), features = x.size(2);
  return index_select(x.reshape({steps * batch, features}), 0, p.reversal).reshape({steps, batch, features});
}

// A packed batch's batch_sizes and orders checked: what pad_packed_sequence
// and the recurrent modules read of a PackedSequence made by hand.
void check_packed(const PackedSequence& p, std::string_view who) {
  const std::vector<int64_t>& sizes = p.batch_sizes;
  LOOM_CHECK(!sizes.empty() && sizes[0] >= 1, ValueError, "[{}] a packed batch needs batch_sizes with a first "
             "value >= 1, got [{}]", who, fmt::join(sizes, ", "));
  int64_t rows = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    LOOM_CHECK(sizes[t] >= 1 && (t == 0 || sizes[t] <= sizes[t - 1]), ValueError,
               "[{}] batch_sizes must be non-increasing values >= 1, got [{}]", who, fmt::join(sizes, ", "));
    rows += sizes[t];
  }
  LOOM_CHECK(p.data.defined() && p.data.dim() >= 1 && p.data.size(0) == rows, ShapeError,
             "[{}] a packed batch's data needs {} rows (the sum of batch_sizes), got {}", who, rows,
             shape_of(p.data));
  const auto batch = static_cast<size_t>(sizes[0]);
  const bool ordered = p.sorted_indices.size() == batch && p.unsorted_indices.size() == batch;
  bool inverse = ordered;
  for (size_t j = 0; inverse && j < batch; ++j) {
    const int64_t n = p.sorted_indices[j];
    inverse = n >= 0 && static_cast<size_t>(n) < batch && p.unsorted_indices[n] == static_cast<int64_t>(j);
  }
  LOOM_CHECK((p.sorted_indices.empty() && p.unsorted_indices.empty()) || inverse, ValueError,
             "[{}] sorted_indices [{}] and unsorted_indices [{}] must both be empty or be inverse orders of the "
             "{} sequences", who, fmt::join(p.sorted_indices, ", "), fmt::join(p.unsorted_indices, ", "), batch);
}

// The batch entry at position j of a packed step (longest first).
int64_t entry_at(const PackedSequence& p, int64_t j) { return p.sorted_indices.empty() ? j : p.sorted_indices[j]; }

// The layout of a batch with these lengths: batch_sizes and, unless the
// lengths are given longest first, the stable order that sorts them so.
PackedSequence layout_of(const std::vector<int64_t>& lengths, bool given_sorted) {
  PackedSequence p;
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  if (!given_sorted) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
    p.sorted_indices = order;
    p.unsorted_indices.resize(order.size());
    for (size_t j = 0; j < order.size(); ++j) p.unsorted_indices[order[j]] = static_cast<int64_t>(j);
  }
  for (int64_t t = 0; t < lengths[order[0]]; ++t) {
    p.batch_sizes.push_back(std::count_if(lengths.begin(), lengths.end(), [t](int64_t l) { return l > t; }));
  }
  return p;
}

// The time-major row (t * batch + n) that each of `layout`'s packed rows holds, in packed order.
std::vector<int64_t> packed_rows(const PackedSequence& layout, int64_t batch) {
  std::vector<int64_t> rows;
  for (size_t t = 0; t < layout.batch_sizes.size(); ++t) {
    const int64_t first = static_cast<int64_t>(t) * batch;
    for (int64_t j = 0; j < layout.batch_sizes[t]; ++j) rows.push_back(first + entry_at(layout, j));
  }
  return rows;
}

// The product of x's sizes after the first `leading` dims (1 for none).
int64_t trailing_numel(const Tensor& x, int64_t leading) {
  return numel_of(Shape(x.sizes().begin() + leading, x.sizes().end()));
}

// x (T, N, *), time-major, as `layout`'s rows: (sum of the lengths, *).
Tensor packed_data(const Tensor& x, const PackedSequence& layout) {
  const int64_t batch = x.size(1);
  const std::vector<int64_t> rows = packed_rows(layout, batch);
  const auto count = static_cast<int64_t>(rows.size());
  const Tensor index = tensor(std::vector<double>(rows.begin(), rows.end()), {count},
                              {.dtype = DType::Int64, .device = x.device()});
  Shape shape(x.sizes().begin() + 1, x.sizes().end());
  shape[0] = count;
  return index_select(x.reshape({x.size(0) * batch, trailing_numel(x, 2)}), 0, index).reshape(shape);
}

// An LSTM layer with a projection, as torch.nn.LSTM's proj_size: h_t =
// W_hr (o_t * tanh(c_t)) and that h fed back. No fused kernel computes the
// projection, so the steps run one by one in differentiable ops (the input's
// product for every step at once), last to first when reversed.
// An undefined h or c is zeros: its terms are left out (no constant of the
// batch's size, so an ONNX export keeps the batch dynamic).
RnnSequence projected_layer(const Tensor& x, const RnnState& state, const std::vector<Tensor>& w, bool reverse) {
  const int64_t steps = x.size(0), hidden = w[4].size(1);
  Tensor in = matmul(x, w[0].t());
  if (w[2].defined()) in = add(in, add(w[2], w[3]));
  Tensor h = state.h, c = state.c;
  std::vector<Tensor> outputs(steps);
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const Tensor gates = h.defined() ? add(in.select(0, t), matmul(h, w[1].t())) : in.select(0, t);  // i, f, g, o
    const auto gate = [&](int64_t g) { return gates.narrow(1, g * hidden, hidden); };
    const Tensor written = mul(sigmoid(gate(0)), tanh(gate(2)));
    c = c.defined() ? add(mul(sigmoid(gate(1)), c), written) : written;
    h = matmul(mul(sigmoid(gate(3)), tanh(c)), w[4].t());
    outputs[t] = h;
  }
  return {stack(outputs, 0), {h, c}};
}

// One layer in one direction with w = {w_ih, w_hh, b_ih, b_hh, w_hr}: rnn_layer,
// or the projected LSTM layer where w_hr is defined.
RnnSequence run_layer(RnnMode mode, const Tensor& x, const RnnState& state, const std::vector<Tensor>& w,
                      bool reverse) {
  return w[4].defined() ? projected_layer(x, state, w, reverse)
                        : rnn_layer(mode, x, state, w[0], w[1], w[2], w[3], reverse);
}

// rnn_layer over padded sequences. The steps run in chunks that end where some
// entry's length ends, each from the state the chunk before left, so every
// entry's state is read right after its last true step; the steps past it
// (computed, since the batch runs together) are zeroed in the output. The
// reverse direction runs forward over each entry's true steps reversed.
RnnSequence padded_layer(RnnMode mode, const Tensor& x, const RnnState& first, const std::vector<Tensor>& w,
                         bool reverse, const Padding& p) {
  const Tensor input = reverse ? reversed_within(x, p) : x;
  RnnState state = first, last;
  std::vector<Tensor> chunks;
  int64_t start = 0;
  for (size_t i = 0; i < p.ends.size(); ++i) {
    const int64_t end = p.ends[i];
    const RnnSequence run = run_layer(mode, input.slice(0, start, end), state, w, false);
    chunks.push_back(run.output);
    state = run.state;
    const Tensor& here = p.ends_here[i];
    const auto pick = [&](const Tensor& now, const Tensor& kept) {
      return kept.defined() ? where(here, now, kept) : now;
    };
    last.h = pick(state.h, last.h);
    if (state.c.defined()) last.c = pick(state.c, last.c);
    start = end;
  }
  if (start < x.size(0)) {
    TensorOptions options = chunks[0].options();
    options.requires_grad = false;
    chunks.push_back(zeros({x.size(0) - start, x.size(1), chunks[0].size(2)}, options));
  }
  const Tensor out = masked_fill(chunks.size() == 1 ? chunks[0] : cat(chunks, 0), p.padding, 0.0);
  return {reverse ? reversed_within(out, p) : out, last};
}

// Each sequence's length in the batch's own order, of a batch check_packed has passed.
std::vector<int64_t> lengths_of(const PackedSequence& p) {
  std::vector<int64_t> out(static_cast<size_t>(p.batch_sizes[0]), 0);
  for (const int64_t size : p.batch_sizes) {
    for (int64_t j = 0; j < size; ++j) ++out[entry_at(p, j)];
  }
  return out;
}

// pad_packed_sequence of a batch check_packed has passed.
PaddedSequence padded_of(const PackedSequence& sequence, bool batch_first, double padding_value,
                         std::optional<int64_t> total_length) {
  const auto longest = static_cast<int64_t>(sequence.batch_sizes.size());
  const int64_t steps = total_length.value_or(longest), batch = sequence.batch_sizes[0];
  LOOM_CHECK(steps >= longest, ValueError,
             "[pad_packed_sequence] total_length is {}, shorter than the longest sequence ({} steps)", steps,
             longest);
  const Tensor& data = sequence.data;
  const int64_t rows = data.size(0), features = trailing_numel(data, 1);
  // The packed row of each (t, n) of the padded batch; rows past a length read the padding row.
  std::vector<double> source(steps * batch, static_cast<double>(rows));
  const std::vector<int64_t> packed = packed_rows(sequence, batch);
  for (size_t row = 0; row < packed.size(); ++row) source[packed[row]] = static_cast<double>(row);
  TensorOptions options = data.options();
  options.requires_grad = false;
  options.memory_format = MemoryFormat::Contiguous;
  const Tensor with_padding = cat({data.reshape({rows, features}), full({1, features}, padding_value, options)}, 0);
  const Tensor index = tensor(source, {steps * batch}, {.dtype = DType::Int64, .device = data.device()});
  Shape shape{steps, batch};
  shape.insert(shape.end(), data.sizes().begin() + 1, data.sizes().end());
  const Tensor padded = index_select(with_padding, 0, index).reshape(shape);
  return {batch_first ? padded.transpose(0, 1) : padded, lengths_of(sequence)};
}

}  // namespace

RNNBase::RNNBase(RnnMode mode, int64_t input_size, int64_t hidden_size, const RNNOptions& options)
    : mode_(checked_mode(mode, options.nonlinearity, class_name(mode, false))),
      input_size_(input_size),
      hidden_size_(hidden_size),
      options_(options) {
  const std::string_view who = class_name(mode, false);
  check_sizes(input_size, hidden_size, who);
  LOOM_CHECK(options.num_layers >= 1, ValueError, "[{}] num_layers must be at least 1, got {}", who,
             options.num_layers);
  LOOM_CHECK(options.dropout >= 0.0 && options.dropout < 1.0, ValueError,
             "[{}] dropout must be in [0, 1), got {}", who, options.dropout);
  LOOM_CHECK(options.proj_size == 0 || mode_ == RnnMode::Lstm, ValueError,
             "[{}] proj_size is an LSTM's option only, got {}; leave it 0 for RNN and GRU", who, options.proj_size);
  LOOM_CHECK(options.proj_size >= 0 && options.proj_size < hidden_size, ValueError,
             "[{}] proj_size must be in [0, hidden_size) = [0, {}), got {}", who, hidden_size, options.proj_size);
  const int64_t rows = rnn_gate_count(mode_) * hidden_size, width = output_size();
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : directions() * width;
    for (int64_t dir = 0; dir < directions(); ++dir) {
      const std::string suffix = fmt::format("_l{}{}", layer, dir == 1 ? "_reverse" : "");
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, empty({rows, in}));
      w.w_hh = register_parameter("weight_hh" + suffix, empty({rows, width}));
      if (options.bias) {
        w.b_ih = register_parameter("bias_ih" + suffix, empty({rows}));
        w.b_hh = register_parameter("bias_hh" + suffix, empty({rows}));
      }
      if (options.proj_size > 0) w.w_hr = register_parameter("weight_hr" + suffix, empty({width, hidden_size}));
      weights_.push_back(w);
    }
  }
  reset_parameters(options.generator);
}

void RNNBase::reset_parameters(Generator* generator) {
  for (const Weights& w : weights_) init_uniform({w.w_ih, w.w_hh, w.b_ih, w.b_hh, w.w_hr}, hidden_size_, generator);
}

const Tensor& RNNBase::parameter(int64_t layer, bool reverse, const std::string& kind) const {
  LOOM_CHECK(layer >= 0 && layer < options_.num_layers && (!reverse || options_.bidirectional), IndexError,
             "[{}] has no layer {}{} ({} layers{})", type_name(), layer, reverse ? " reverse" : "",
             options_.num_layers, options_.bidirectional ? ", bidirectional" : "");
  const Weights& w = weights_[layer * directions() + (reverse ? 1 : 0)];
  if (kind == "weight_ih") return w.w_ih;
  if (kind == "weight_hh") return w.w_hh;
  if (kind == "bias_ih") return w.b_ih;
  if (kind == "weight_hr" && w.w_hr.defined()) return w.w_hr;
  LOOM_CHECK(kind == "bias_hh", ValueError, "[{}] parameter kind must be weight_ih, weight_hh, bias_ih, bias_hh{}, "
             "got '{}'", type_name(), w.w_hr.defined() ? " or weight_hr" : " (weight_hr with a proj_size)", kind);
  return w.b_hh;
}

Tensor RNNBase::initial(const Tensor& given, bool batched, int64_t batch, const char* name) const {
  const int64_t rows = options_.num_layers * directions();
  if (!given.defined()) return given;
  const bool projected = std::string_view(name) == "h" && options_.proj_size > 0;
  const int64_t width = projected ? options_.proj_size : hidden_size_;
  const Shape expected = batched ? Shape{rows, batch, width} : Shape{rows, width};
  LOOM_CHECK(given.sizes() == expected, ShapeError,
             "[{}] the initial state {} must be {} (num_layers * directions{}, {}), got {}", type_name(), name,
             shape_str(expected), batched ? ", batch" : "", projected ? "proj_size" : "hidden_size",
             shape_str(given.sizes()));
  return batched ? given : given.unsqueeze(1);
}

void RNNBase::check_lengths(const std::vector<int64_t>& lengths, bool batched, const Tensor& x) const {
  if (lengths.empty()) return;
  LOOM_CHECK(batched, ValueError, "[{}] lengths apply to a batch of sequences; the input is unbatched, {}",
             type_name(), shape_str(x.squeeze(1).sizes()));
  loom::nn::check_lengths(lengths, x.size(0), x.size(1), 1, type_name());
}

RNNOutput RNNBase::forward(const Tensor& input, const RnnState& state, const std::vector<int64_t>& lengths) {
  const std::string who = type_name();
  LOOM_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3), ShapeError,
             "[{}] input must be {} or unbatched (L, {}), got {}", who,
             options_.batch_first ? "(N, L, features)" : "(L, N, features)", input_size_, shape_of(input));
  LOOM_CHECK(input.size(-1) == input_size_, ShapeError,
             "[{}] input has {} features in its last dim, the module's input_size is {} (input {})", who,
             input.size(-1), input_size_, shape_str(input.sizes()));
  LOOM_CHECK(mode_ == RnnMode::Lstm || !state.c.defined(), ValueError,
             "[{}] takes no cell state c; only an LSTM has one", who);
  const bool batched = input.dim() == 3;
  Tensor x = !batched ? input.unsqueeze(1) : options_.batch_first ? input.transpose(0, 1) : input;
  const int64_t batch = x.size(1);
  check_lengths(lengths, batched, x);
  const std::optional<Padding> padding =
      lengths.empty() ? std::nullopt : std::optional(padding_of(lengths, x.size(0), x.device()));
  const Tensor h0 = initial(state.h, batched, batch, "h");
  const Tensor c0 = mode_ == RnnMode::Lstm ? initial(state.c, batched, batch, "c") : Tensor();
  std::vector<Tensor> hs, cs;
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    std::vector<Tensor> outputs;
    for (int64_t dir = 0; dir < directions(); ++dir) {
      const int64_t row = layer * directions() + dir;
      const Weights& w = weights_[row];
      const auto row_of = [row](const Tensor& t) { return t.defined() ? t.select(0, row) : t; };
      const RnnState first{row_of(h0), row_of(c0)};
      const std::vector<Tensor> ws{w.w_ih, w.w_hh, w.b_ih, w.b_hh, w.w_hr};
      RnnSequence run = padding ? padded_layer(mode_, x, first, ws, dir == 1, *padding)
                                : run_layer(mode_, x, first, ws, dir == 1);
      outputs.push_back(run.output);
      hs.push_back(run.state.h);
      if (run.state.c.defined()) cs.push_back(run.state.c);
    }
    x = outputs.size() == 1 ? outputs[0] : cat(outputs, 2);
    const bool between_layers = layer + 1 < options_.num_layers;
    if (options_.dropout > 0.0 && between_layers) x = dropout(x, options_.dropout, is_training());
  }
  const auto unbatch = [batched](const Tensor& t) { return batched ? t : t.squeeze(1); };
  RNNOutput out;
  out.output = !batched ? x.squeeze(1) : options_.batch_first ? x.transpose(0, 1) : x;
  out.state.h = unbatch(stack(hs, 0));
  if (!cs.empty()) out.state.c = unbatch(stack(cs, 0));
  return out;
}

Tensor RNNBase::forward(const Tensor& input) { return forward(input, RnnState{}).output; }

RNNOutput RNNBase::operator()(const Tensor& input, const RnnState& state, const std::vector<int64_t>& lengths) {
  RNNOutput out;
  call(input, [&] {
    out = forward(input, state, lengths);
    return out.output;
  });
  return out;
}

PackedRNNOutput RNNBase::forward(const PackedSequence& input, const RnnState& state) {
  LOOM_CHECK(input.data.defined() && input.data.dim() == 2, ShapeError,
             "[{}] a packed input's data must be (sum of the lengths, {}), got {}", type_name(), input_size_,
             shape_of(input.data));
  check_packed(input, type_name());
  const auto [padded, lengths] = padded_of(input, options_.batch_first, 0.0, std::nullopt);
  const RNNOutput out = forward(padded, state, lengths);
  PackedSequence output = input;
  output.data = packed_data(options_.batch_first ? out.output.transpose(0, 1) : out.output, input);
  return {output, out.state};
}

PackedRNNOutput RNNBase::operator()(const PackedSequence& input, const RnnState& state) {
  PackedRNNOutput out;
  call(input.data, [&] {
    out = forward(input, state);
    return out.output.data;
  });
  return out;
}

std::string RNNBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size_, hidden_size_);
  if (options_.proj_size != 0) s += fmt::format(", proj_size={}", options_.proj_size);
  if (options_.num_layers != 1) s += fmt::format(", num_layers={}", options_.num_layers);
  if (!options_.bias) s += ", bias=False";
  if (options_.batch_first) s += ", batch_first=True";
  if (options_.dropout != 0.0) s += ", dropout=" + python_float(options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  LOOM_CHECK(!sequences.empty(), ValueError, "[pad_sequence] needs at least one sequence, got none");
  const Tensor& first = sequences[0];
  int64_t steps = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    LOOM_CHECK(s.defined() && s.dim() >= 1, ShapeError,
               "[pad_sequence] sequence {} must be (L, *) with at least one dim, got {}", i, shape_of(s));
    const bool same_trailing =
        s.dim() == first.dim() && std::equal(s.sizes().begin() + 1, s.sizes().end(), first.sizes().begin() + 1);
    LOOM_CHECK(same_trailing, ShapeError,
               "[pad_sequence] every sequence needs sequence 0's trailing sizes: sequence 0 is {}, {} is {}",
               shape_str(first.sizes()), i, shape_str(s.sizes()));
    LOOM_CHECK(s.dtype() == first.dtype() && s.device() == first.device(), TypeError,
               "[pad_sequence] sequence {} is {} on {}, sequence 0 {} on {}; convert them to one", i,
               dtype_name(s.dtype()), s.device().str(), dtype_name(first.dtype()), first.device().str());
    steps = std::max(steps, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    std::vector<int64_t> pads(2 * static_cast<size_t>(s.dim()), 0);
    pads.back() = steps - s.size(0);  // after the last step; the trailing dims' pairs come first
    padded.push_back(pads.back() == 0 ? s : pad(s, pads, PadMode::Constant, padding_value));
  }
  return stack(padded, batch_first ? 0 : 1);
}

std::vector<int64_t> PackedSequence::lengths() const {
  check_packed(*this, "PackedSequence::lengths");
  return lengths_of(*this);
}

PackedSequence PackedSequence::to(Device device) const {
  PackedSequence moved = *this;
  moved.data = data.to(device);
  return moved;
}

PackedSequence PackedSequence::to(DType dtype) const {
  PackedSequence cast = *this;
  cast.data = data.to(dtype);
  return cast;
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  LOOM_CHECK(input.defined() && input.dim() >= 2, ShapeError,
             "[pack_padded_sequence] input must be {} with at least two dims, got {}",
             batch_first ? "(N, L, *)" : "(L, N, *)", shape_of(input));
  const Tensor x = batch_first ? input.transpose(0, 1) : input;
  const int64_t steps = x.size(0), batch = x.size(1);
  LOOM_CHECK(batch >= 1, ShapeError, "[pack_padded_sequence] input {} holds no sequences",
             shape_str(input.sizes()));
  check_lengths(lengths, steps, batch, 1, "pack_padded_sequence");
  for (size_t n = 1; enforce_sorted && n < lengths.size(); ++n) {
    LOOM_CHECK(lengths[n] <= lengths[n - 1], ValueError,
               "[pack_padded_sequence] lengths [{}] are not sorted longest first; sort the batch so, or pass "
               "enforce_sorted = false to have them sorted here", fmt::join(lengths, ", "));
  }
  PackedSequence p = layout_of(lengths, enforce_sorted);
  p.data = packed_data(x, p);
  return p;
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  const Tensor padded = pad_sequence(sequences);
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.size(0));
  return pack_padded_sequence(padded, lengths, false, enforce_sorted);
}

PaddedSequence pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                   std::optional<int64_t> total_length) {
  check_packed(sequence, "pad_packed_sequence");
  return padded_of(sequence, batch_first, padding_value, total_length);
}

std::vector<Tensor> unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first) {
  LOOM_CHECK(padded.defined() && padded.dim() >= 2, ShapeError,
             "[unpad_sequence] padded must be {} with at least two dims, got {}",
             batch_first ? "(N, L, *)" : "(L, N, *)", shape_of(padded));
  const Tensor x = batch_first ? padded.transpose(0, 1) : padded;
  check_lengths(lengths, x.size(0), x.size(1), 0, "unpad_sequence");
  std::vector<Tensor> sequences;
  for (size_t n = 0; n < lengths.size(); ++n) {
    sequences.push_back(x.select(1, static_cast<int64_t>(n)).slice(0, 0, lengths[n]));
  }
  return sequences;
}

std::vector<Tensor> unpack_sequence(const PackedSequence& sequence) {
  const auto [padded, lengths] = pad_packed_sequence(sequence);
  return unpad_sequence(padded, lengths);
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(RnnMode::Tanh, input_size, hidden_size, options) {}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(RnnMode::Lstm, input_size, hidden_size, options) {}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(RnnMode::Gru, input_size, hidden_size, options) {}

RNNCellBase::RNNCellBase(RnnMode mode, int64_t input_size, int64_t hidden_size, const RNNCellOptions& options)
    : mode_(checked_mode(mode, options.nonlinearity, class_name(mode, true))),
      input_size_(input_size),
      hidden_size_(hidden_size) {
  check_sizes(input_size, hidden_size, class_name(mode, true));
  const int64_t rows = rnn_gate_count(mode_) * hidden_size;
  w_ih_ = register_parameter("weight_ih", empty({rows, input_size}));
  w_hh_ = register_parameter("weight_hh", empty({rows, hidden_size}));
  if (options.bias) {
    b_ih_ = register_parameter("bias_ih", empty({rows}));
    b_hh_ = register_parameter("bias_hh", empty({rows}));
  }
  reset_parameters(options.generator);
}

void RNNCellBase::reset_parameters(Generator* generator) {
  init_uniform({w_ih_, w_hh_, b_ih_, b_hh_}, hidden_size_, generator);
}

Tensor RNNCellBase::initial(const Tensor& given, bool batched, const Tensor& x, const char* name) const {
  if (!given.defined()) return given;
  const Shape expected = batched ? Shape{x.size(0), hidden_size_} : Shape{hidden_size_};
  LOOM_CHECK(given.sizes() == expected, ShapeError, "[{}] the state {} must be {} ({}hidden_size), got {}",
             type_name(), name, shape_str(expected), batched ? "batch, " : "", shape_str(given.sizes()));
  return batched ? given : given.unsqueeze(0);
}

RnnState RNNCellBase::forward(const Tensor& x, const RnnState& state) {
  const std::string who = type_name();
  LOOM_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2) && x.size(-1) == input_size_, ShapeError,
             "[{}] input must be (N, {}) or unbatched ({}), got {}", who, input_size_, input_size_, shape_of(x));
  LOOM_CHECK(mode_ == RnnMode::Lstm || !state.c.defined(), ValueError,
             "[{}] takes no cell state c; only an LSTMCell has one", who);
  const bool batched = x.dim() == 2;
  const Tensor x2 = batched ? x : x.unsqueeze(0);
  const RnnState first{initial(state.h, batched, x2, "h"),
                       mode_ == RnnMode::Lstm ? initial(state.c, batched, x2, "c") : Tensor()};
  RnnState next = rnn_cell(mode_, x2, first, w_ih_, w_hh_, b_ih_, b_hh_);
  if (!batched) {
    next.h = next.h.squeeze(0);
    if (next.c.defined()) next.c = next.c.squeeze(0);
  }
  return next;
}

Tensor RNNCellBase::forward(const Tensor& x) { return forward(x, RnnState{}).h; }

RnnState RNNCellBase::operator()(const Tensor& x, const RnnState& state) {
  RnnState next;
  call(x, [&] {
    next = forward(x, state);
    return next.h;
  });
  return next;
}

std::string RNNCellBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", input_size_, hidden_size_);
  if (!b_ih_.defined()) s += ", bias=False";
  if (mode_ == RnnMode::Relu) s += ", nonlinearity=relu";
  return s;
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options)
    : RNNCellBase(RnnMode::Tanh, input_size, hidden_size, options) {}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options)
    : RNNCellBase(RnnMode::Lstm, input_size, hidden_size, options) {}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, RNNCellOptions options)
    : RNNCellBase(RnnMode::Gru, input_size, hidden_size, options) {}

}  // namespace loom::nn
