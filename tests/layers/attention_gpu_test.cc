// File: tests/layers/attention_gpu_test.cc
// nn::TransformerEncoderLayer and nn::TransformerDecoderLayer (and so
// nn::MultiheadAttention) on the GPU compute what their CPU twins with the same
// weights compute: the output and every gradient, with causal masks and key
// padding, in strict fp32 and in float64, post- and pre-norm, batch first or
// not; and the encoder layer in TF32 and under bf16 autocast, within their
// rounding.
//
// L sequence length, N batch, E d_model.
#include <doctest/doctest.h>

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct Run {
  Tensor y;
  std::map<std::string, Tensor> grads;
};

Run step(nn::TransformerEncoderLayer& layer, const Tensor& x, const nn::EncoderCall& call, const Tensor& dy) {
  layer.zero_grad();
  Run r{.y = layer(x, call)};
  r.y.backward(dy);
  for (const auto& [name, p] : layer.named_parameters()) r.grads[name] = p.grad();
  return r;
}

void check_twins(bool norm_first, bool batch_first, DType dtype, bool autocast, double tol,
                 kernel::ActivationKind act = kernel::ActivationKind::Relu) {
  Generator gen(91);
  const nn::TransformerLayerOptions o{.dim_feedforward = 24, .dropout = 0.0, .activation = act,
                                             .batch_first = batch_first, .norm_first = norm_first};
  nn::TransformerLayerOptions drawn = o;
  drawn.generator = &gen;
  nn::TransformerEncoderLayer cpu(16, 4, drawn), gpu(16, 4, o);
  cpu.to(DType::Float64);
  gpu.to(DType::Float64);  // load_state_dict wants the dtypes equal
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(testing::test_gpu()).to(autocast ? DType::Float32 : dtype);
  const Shape shape = batch_first ? Shape{3, 7, 16} : Shape{7, 3, 16};
  const Tensor x = randn(shape, {.dtype = DType::Float64}, &gen), dy = randn(shape, {.dtype = DType::Float64}, &gen);
  const Tensor pad = tensor({0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}, {3, 7},
                            {.dtype = DType::Bool});
  const nn::EncoderCall call{.src_key_padding_mask = pad, .is_causal = true};
  const Run want = step(cpu, x, call, dy);
  const nn::EncoderCall gpu_call{.src_key_padding_mask = pad.to(testing::test_gpu()), .is_causal = true};
  const DType in = autocast ? DType::Float32 : dtype;
  Run got;
  {
    std::optional<AutocastGuard> bf16;
    if (autocast) bf16.emplace(DType::BFloat16);
    got = step(gpu, x.to(in).to(testing::test_gpu()), gpu_call, dy.to(in).to(testing::test_gpu()));
  }
  CHECK(testing::normalized_error(got.y.cpu().to(DType::Float64), want.y) <= tol);
  for (const auto& [name, g] : want.grads) {
    CAPTURE(name);
    CHECK(testing::normalized_error(got.grads[name].cpu().to(DType::Float64), g) <= 4 * tol);
  }
}

LOOM_GPU_TEST_CASE("TransformerEncoderLayer on the GPU matches its CPU twin: causal, key padding, every layout") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (const bool norm_first : {false, true}) {
    for (const bool batch_first : {false, true}) {
      CAPTURE(norm_first);
      CAPTURE(batch_first);
      check_twins(norm_first, batch_first, DType::Float64, false, 1e-12);
      check_twins(norm_first, batch_first, DType::Float32, false, 1e-5);
    }
  }
}

// Rounded runs use GELU: under ReLU a feed-forward pre-activation within the
// rounding of zero takes the other branch, and its whole term moves linear1's
// gradients (and, pre-norm, norm2's) by far more than the rounding (a bf16 run
// on an H100: 0.18-0.29 of their largest element).
LOOM_GPU_TEST_CASE("TransformerEncoderLayer in TF32 on the GPU stays within TF32's rounding") {
  NumericsGuard tf32({.precision = Precision::Tf32});
  check_twins(false, true, DType::Float32, false, 5e-3, kernel::ActivationKind::Gelu);
  check_twins(true, false, DType::Float32, false, 5e-3, kernel::ActivationKind::Gelu);
}

LOOM_GPU_TEST_CASE("TransformerEncoderLayer under bf16 autocast on the GPU stays within bf16's rounding") {
  check_twins(false, true, DType::Float32, true, 3e-2, kernel::ActivationKind::Gelu);
  check_twins(true, false, DType::Float32, true, 3e-2, kernel::ActivationKind::Gelu);
}

// The decoder layer on the GPU against its CPU twin: a causal target with key
// padding attending to a memory of another length with its own padding, every
// gradient (the memory's too).
void check_decoder_twins(bool norm_first, bool batch_first, DType dtype, double tol) {
  Generator gen(93);
  const nn::TransformerLayerOptions o{.dim_feedforward = 20, .dropout = 0.0, .activation = kernel::ActivationKind::Gelu,
                                      .batch_first = batch_first, .norm_first = norm_first};
  nn::TransformerLayerOptions drawn = o;
  drawn.generator = &gen;
  nn::TransformerDecoderLayer cpu(12, 3, drawn), gpu(12, 3, o);
  cpu.to(DType::Float64);
  gpu.to(DType::Float64);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(testing::test_gpu()).to(dtype);
  auto laid_out = [&](const Shape& s) { return batch_first ? s : Shape{s[1], s[0], s[2]}; };
  const TensorOptions f64{.dtype = DType::Float64};
  const Tensor x = randn(laid_out({2, 6, 12}), f64, &gen), dy = randn(laid_out({2, 6, 12}), f64, &gen);
  const Tensor memory = randn(laid_out({2, 9, 12}), f64, &gen).requires_grad_(true);
  const Tensor tgt_pad = tensor({0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}, {2, 6}, {.dtype = DType::Bool});
  const Tensor mem_pad = tensor({0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 9}, {.dtype = DType::Bool});
  auto run = [&](nn::TransformerDecoderLayer& layer, const Tensor& tgt, const Tensor& mem, const Device& d) {
    layer.zero_grad();
    Run r{.y = layer(tgt, mem, {.tgt_key_padding_mask = tgt_pad.to(d), .memory_key_padding_mask = mem_pad.to(d),
                                .tgt_is_causal = true})};
    r.y.backward(dy.to(tgt.dtype()).to(d));
    for (const auto& [name, p] : layer.named_parameters()) r.grads[name] = p.grad();
    return r;
  };
  const Run want = run(cpu, x, memory, Device::cpu());
  const Tensor want_dmem = memory.grad();
  const Tensor mem_gpu = memory.detach().to(dtype).to(testing::test_gpu()).requires_grad_(true);
  const Run got = run(gpu, x.to(dtype).to(testing::test_gpu()), mem_gpu, testing::test_gpu());
  CHECK(testing::normalized_error(got.y.cpu().to(DType::Float64), want.y) <= tol);
  CHECK(testing::normalized_error(mem_gpu.grad().cpu().to(DType::Float64), want_dmem) <= 4 * tol);
  for (const auto& [name, g] : want.grads) {
    CAPTURE(name);
    CHECK(testing::normalized_error(got.grads.at(name).cpu().to(DType::Float64), g) <= 4 * tol);
  }
}

LOOM_GPU_TEST_CASE("TransformerDecoderLayer on the GPU matches its CPU twin: causal target, padded memory") {
  NumericsGuard strict({.precision = Precision::StrictFp32});
  for (const bool norm_first : {false, true}) {
    for (const bool batch_first : {false, true}) {
      CAPTURE(norm_first);
      CAPTURE(batch_first);
      check_decoder_twins(norm_first, batch_first, DType::Float64, 1e-12);
      check_decoder_twins(norm_first, batch_first, DType::Float32, 1e-5);
    }
  }
}

// Token embeddings, nn::Transformer (with its dropout) and a head: the model a
// user trains on sequence pairs.
struct Seq2Seq {
  nn::Embedding tokens{9, 16};
  nn::Transformer transformer{{.d_model = 16, .nhead = 4, .num_encoder_layers = 1, .num_decoder_layers = 1,
                               .dim_feedforward = 32, .batch_first = true}};
  nn::Linear head{16, 8};

  std::vector<Tensor> parameters() const {
    std::vector<Tensor> all = tokens.parameters();
    for (const nn::Module* m : std::initializer_list<const nn::Module*>{&transformer, &head}) {
      for (const Tensor& p : m->parameters()) all.push_back(p);
    }
    return all;
  }
  void to(Device d) {
    tokens.to(d);
    transformer.to(d);
    head.to(d);
  }
};

LOOM_GPU_TEST_CASE("a Transformer's training step with masks and dropout captures, and replays the eager bits") {
  NumericsGuard numerics({.precision = Precision::Tf32, .deterministic = true});
  const Device gpu = testing::test_gpu();
  Generator data(94);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 2; ++i) {
    batches.emplace_back(randint(0, 8, {4, 7}, {.dtype = DType::Int64}, &data).to(gpu),
                         randint(0, 8, {4, 5}, {.dtype = DType::Int64}, &data).to(gpu));
  }
  const Tensor pad = (rand({4, 7}, {}, &data) < 0.2).to(gpu);  // padded source positions
  const Tensor start = full({4, 1}, 8.0, {.dtype = DType::Int64, .device = gpu});
  auto train = [&](bool graph) {
    manual_seed(95);
    Seq2Seq m;
    m.to(gpu);
    optim::Adam adam(m.parameters(), {.lr = 1e-3});
    optim::TrainStep step(
        [&](const Tensor& src, const Tensor& tgt) {
          const Tensor tgt_in = cat({start, tgt.narrow(1, 0, tgt.size(1) - 1)}, 1);
          const Tensor out = m.transformer(m.tokens(src), m.tokens(tgt_in),
                                           {.src_key_padding_mask = pad, .memory_key_padding_mask = pad,
                                            .tgt_is_causal = true});
          return std::vector<Tensor>{cross_entropy(m.head(out).reshape({-1, 8}), tgt.reshape({-1}))};
        },
        adam, {.cuda_graph = graph});
    std::vector<double> losses;
    for (int i = 0; i < 8; ++i) losses.push_back(step(batches[i % 2].first, batches[i % 2].second)[0].item());
    CAPTURE(step.fallback_reason());
    if (graph) CHECK(step.stats().replays > 0);
    return std::pair{losses, m.head.weight().cpu()};
  };
  const auto [eager_losses, eager_head] = train(false);
  const auto [graph_losses, graph_head] = train(true);
  CHECK(eager_losses == graph_losses);
  CHECK_CLOSE(eager_head, graph_head, 0, 0);
  CHECK(eager_losses[6] < eager_losses[0]);  // the same batch, six Adam steps later
}

}  // namespace
}  // namespace loom
