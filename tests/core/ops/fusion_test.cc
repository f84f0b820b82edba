// File: tests/core/ops/fusion_test.cc
// fusion::Block on the CPU: the one-by-one evaluation and the pieces the GPU
// runs (with the head's derived backward) are gradchecked in float64 for every
// activation row, batch norm, residual, scalar and tensor operands, in NCHW and
// channels-last, and agree with each other; the description and its errors.
//
// N batch, C in channels, H, W input, K out channels.
#include "core/ops/fusion.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/fusion_report.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

using fusion::Block;

const TensorOptions kFloat64 = {.dtype = DType::Float64};

Tensor leaf(const Tensor& t) { return t.detach().clone().requires_grad_(true); }

bool is_buffer(const std::string& operand_name) { return operand_name.find("running_") != std::string::npos; }

// Gradchecks both evaluations of `block` w.r.t. x and every operand but the
// running statistics (buffers: no gradient).
void check_block(const Block& block, const Tensor& x, const std::vector<Tensor>& operands) {
  CAPTURE(block.str());
  std::vector<Tensor> inputs = {leaf(x)};
  const std::vector<std::string> names = block.operand_names();
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    inputs.push_back(!t.defined() ? Tensor() : is_buffer(names[i]) ? t.clone() : leaf(t));
  }
  auto split = [](const std::vector<Tensor>& in) { return std::vector<Tensor>(in.begin() + 1, in.end()); };
  GradcheckResult unfused =
      gradcheck([&](const std::vector<Tensor>& in) { return block.forward_unfused(in[0], split(in)); }, inputs);
  CHECK_MESSAGE(unfused.ok, unfused.message);
  GradcheckResult pieces =
      gradcheck([&](const std::vector<Tensor>& in) { return block.forward_pieces(in[0], split(in)); }, inputs);
  CHECK_MESSAGE(pieces.ok, pieces.message);
}

// Both evaluations on separate leaves: the same output and gradients.
void check_pieces_match(const Block& block, const Tensor& x, const std::vector<Tensor>& operands,
                        Generator& gen) {
  CAPTURE(block.str());
  std::vector<Tensor> a = {leaf(x)}, b = {leaf(x)};
  for (const Tensor& t : operands) {
    a.push_back(t.defined() ? leaf(t) : Tensor());
    b.push_back(t.defined() ? leaf(t) : Tensor());
  }
  Tensor ya = block.forward_pieces(a[0], {a.begin() + 1, a.end()});
  Tensor yb = block.forward_unfused(b[0], {b.begin() + 1, b.end()});
  CHECK_CLOSE(ya, yb, 1e-5, 1e-5);
  Tensor dy = randn(yb.sizes(), {.dtype = yb.dtype()}, &gen);
  ya.backward(dy);
  yb.backward(dy);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined()) continue;
    CAPTURE(i);
    REQUIRE(a[i].grad().defined());
    CHECK_CLOSE(a[i].grad(), b[i].grad(), 1e-5, 1e-5);
  }
}

Tensor layout(const Tensor& x, bool channels_last) {
  return channels_last ? x.contiguous(MemoryFormat::ChannelsLast) : x;
}

}  // namespace

TEST_CASE("a block describes itself: steps, operand names and the GPU's pieces") {
  Block block = Block().conv2d({.padding = {1, 1}}).bias().batch_norm().add_residual().relu().mul(0.5);
  CHECK(block.str() == "conv2d(stride=1, padding=1) -> bias -> batch_norm -> add_residual -> relu -> mul 0.5");
  CHECK(block.operand_names() == std::vector<std::string>{"weight", "bias", "norm.weight", "norm.bias",
                                                          "norm.running_mean", "norm.running_var",
                                                          "residual"});
  CHECK(block.pieces_str() ==
        "[conv2d(stride=1, padding=1) -> bias] [batch_norm -> add_residual -> relu] [mul 0.5]");
  Block user = Block().linear().scale_bias().gelu().add();
  CHECK(user.operand_names() == std::vector<std::string>{"weight", "scale", "shift", "add.3"});
  CHECK(user.pieces_str() == "[linear -> scale_bias -> gelu -> add]");
  // A training batch norm takes any activation row (MobileNetV2's ReLU6), and the residual before it.
  Block mobile = Block().conv2d().batch_norm().activation(ActivationKind::Relu6).add_residual();
  CHECK(mobile.pieces_str() == "[conv2d(stride=1, padding=0)] [batch_norm -> relu6] [add_residual]");
  Block swish = Block().conv2d().batch_norm().add_residual().silu();
  CHECK(swish.pieces_str() == "[conv2d(stride=1, padding=0)] [batch_norm -> add_residual -> silu]");
}

TEST_CASE("an eval-mode batch norm says so, and its block's pieces differ from training's") {
  const Block eval = Block().conv2d().bias().batch_norm({.training = false}).relu();
  CHECK(eval.str() == "conv2d(stride=1, padding=0) -> bias -> batch_norm(eval) -> relu");
  CHECK(eval.pieces_str() == "[conv2d(stride=1, padding=0) -> bias] [batch_norm(eval)] [relu]");
}

TEST_CASE("the report keeps a piece's backward note across a forward that ran no backward") {
  fusion::clear_report();
  const Block block = Block().conv2d().bias().gelu();
  const Tensor x = zeros({1, 2, 4, 4});
  const std::vector<Tensor> operands{zeros({3, 2, 3, 3}), zeros({3})};
  auto forward_ran = [&](std::string how) {
    fusion::note_block_run(block, x, operands, {{.piece = "[conv2d -> bias -> gelu]", .how = std::move(how)}});
  };
  forward_ran("one cuDNN graph");
  fusion::note_backward(fusion::run_key(block, x), 0, "derivative as one graph (engine 1) + dgrad/wgrad");
  forward_ran("one cuDNN graph");  // an eval pass or a timing run: no backward
  std::vector<fusion::BlockReport> reports = fusion::block_reports();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].runs == 2);
  CHECK(reports[0].pieces.at(0).backward == "derivative as one graph (engine 1) + dgrad/wgrad");
  forward_ran("unfused");  // it ran another way: the old note no longer describes it
  reports = fusion::block_reports();
  CHECK(reports.at(0).pieces.at(0).backward.empty());
  fusion::clear_report();
}

TEST_CASE("conv2d + bias + every activation row: gradcheck in float64, NCHW and channels-last") {
  Generator gen(11);
  Tensor x = randn({2, 3, 5, 4}, kFloat64, &gen), w = randn({4, 3, 3, 3}, kFloat64, &gen);
  Tensor b = randn({4}, kFloat64, &gen);
  for (ActivationKind kind : kernel::kActivationKinds) {
    CAPTURE(kernel::activation_info(kind).name);
    for (bool channels_last : {false, true}) {
      CAPTURE(channels_last);
      Block block = Block().conv2d({.padding = {1, 1}}).bias().activation(kind);
      check_block(block, layout(x, channels_last), {layout(w, channels_last), b});
    }
  }
}

TEST_CASE("a user chain gelu(scale * conv(x) + shift), scalar and tensor operands: gradcheck") {
  Generator gen(12);
  Tensor x = randn({2, 3, 5, 5}, kFloat64, &gen), w = randn({4, 3, 3, 3}, kFloat64, &gen);
  Tensor scale = randn({4}, kFloat64, &gen), shift = randn({4}, kFloat64, &gen);
  Tensor per_channel = randn({1, 4, 1, 1}, kFloat64, &gen), full = randn({2, 4, 3, 3}, kFloat64, &gen);
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Tensor xl = layout(x, channels_last), wl = layout(w, channels_last);
    check_block(Block().conv2d().scale_bias().gelu(), xl, {wl, scale, shift});
    check_block(Block().conv2d().mul(0.5).add(1.0).sub(0.25).silu().mul().sub(), xl,
                {wl, per_channel, layout(full, channels_last)});
    check_block(Block().conv2d().add_residual().activation(ActivationKind::Tanh), xl, {wl, full});
  }
}

TEST_CASE("conv2d + batch norm + residual + activation: gradcheck (training and eval)") {
  Generator gen(13);
  Tensor x = randn({3, 2, 4, 4}, kFloat64, &gen), w = randn({4, 2, 3, 3}, kFloat64, &gen);
  Tensor gamma = randn({4}, kFloat64, &gen), beta = randn({4}, kFloat64, &gen);
  Tensor residual = randn({3, 4, 4, 4}, kFloat64, &gen);
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Tensor xl = layout(x, channels_last), wl = layout(w, channels_last), rl = layout(residual, channels_last);
    // No running statistics: gradcheck calls the block many times.
    check_block(Block().conv2d({.padding = {1, 1}}).batch_norm().add_residual().relu(), xl,
                {wl, gamma, beta, Tensor(), Tensor(), rl});
    check_block(Block().conv2d({.padding = {1, 1}}).batch_norm().gelu().add(0.5), xl,
                {wl, gamma, beta, Tensor(), Tensor()});
    Tensor mean = randn({4}, kFloat64, &gen), var = rand({4}, kFloat64, &gen) + 0.5;
    check_block(Block().conv2d({.padding = {1, 1}}).bias().batch_norm({.training = false}).relu(), xl,
                {wl, beta, gamma, beta, mean, var});
  }
}

TEST_CASE("linear + bias + activations, batch norm and tensor operands: gradcheck") {
  Generator gen(14);
  Tensor x = randn({5, 3}, kFloat64, &gen), w = randn({4, 3}, kFloat64, &gen);
  Tensor b = randn({4}, kFloat64, &gen), row = randn({4}, kFloat64, &gen), full = randn({5, 4}, kFloat64, &gen);
  for (ActivationKind kind : kernel::kActivationKinds) {
    CAPTURE(kernel::activation_info(kind).name);
    check_block(Block().linear().bias().activation(kind), x, {w, b});
  }
  check_block(Block().linear().bias().relu(), x, {w, b});  // the fused op linear_relu
  check_block(Block().linear().mul().add_residual().gelu(), x, {w, row, full});
  check_block(Block().linear().batch_norm().relu(), x, {w, b, row, Tensor(), Tensor()});
  Tensor x3 = randn({2, 3, 3}, kFloat64, &gen);
  check_block(Block().linear().bias().silu().mul(2.0), x3, {w, b});
}

TEST_CASE("the pieces and the one-by-one evaluation agree, with running statistics updated alike") {
  Generator gen(15);
  Tensor x = randn({4, 3, 6, 5}), w = randn({8, 3, 3, 3}), b = randn({8});
  Tensor gamma = randn({8}), beta = randn({8}), residual = randn({4, 8, 6, 5});
  for (bool channels_last : {false, true}) {
    CAPTURE(channels_last);
    Tensor xl = layout(x, channels_last), wl = layout(w, channels_last);
    check_pieces_match(Block().conv2d({.padding = {1, 1}}).bias().relu(), xl, {wl, b}, gen);
    check_pieces_match(Block().conv2d({.stride = {2, 2}}).bias().gelu().mul(3.0), xl, {wl, b}, gen);
    Tensor mean_a = zeros({8}), var_a = ones({8}), mean_b = zeros({8}), var_b = ones({8});
    Block norm = Block().conv2d({.padding = {1, 1}}).batch_norm().add_residual().relu();
    Tensor rl = layout(residual, channels_last);
    Tensor ya = norm.forward_pieces(xl, {wl, gamma, beta, mean_a, var_a, rl});
    Tensor yb = norm.forward_unfused(xl, {wl, gamma, beta, mean_b, var_b, rl});
    CHECK_CLOSE(ya, yb, 1e-5, 1e-5);
    CHECK_CLOSE(mean_a, mean_b, 1e-6, 1e-6);
    CHECK_CLOSE(var_a, var_b, 1e-6, 1e-6);
    check_pieces_match(norm, xl, {wl, gamma, beta, Tensor(), Tensor(), rl}, gen);
    Block mobile = Block().conv2d({.padding = {1, 1}}).bias().batch_norm().activation(ActivationKind::Relu6);
    check_pieces_match(mobile, xl, {wl, b, mul(gamma, 4.0), beta, Tensor(), Tensor()}, gen);
    check_pieces_match(Block().conv2d().batch_norm().add_residual().activation(ActivationKind::Hardtanh, {-0.5, 2.0}),
                       xl, {layout(randn({8, 3, 1, 1}, {}, &gen), channels_last), gamma, beta, Tensor(), Tensor(),
                            layout(randn({4, 8, 6, 5}, {}, &gen), channels_last)},
                       gen);
  }
}

TEST_CASE("block errors name the block, the operands and the fix") {
  CHECK_THROWS_WITH_FRAGMENT(Block().relu().conv2d(), ValueError, "conv2d must be the block's first step");
  CHECK_THROWS_WITH_FRAGMENT(Block().linear().activation(ActivationKind::Relu, {0.5}), ValueError,
                             "[fusion::Block relu] takes no parameter, got 0.5");
  Tensor x = randn({1, 3, 4, 4}), w = randn({2, 3, 3, 3});
  CHECK_THROWS_WITH_FRAGMENT(Block().conv2d().bias()(x, {w}), ValueError,
                             "takes 2 operands (weight, bias) but got 1");
  CHECK_THROWS_WITH_FRAGMENT(Block().conv2d().bias()(x, {w, Tensor()}), ValueError,
                             "operand 1 ('bias') of conv2d(stride=1, padding=0) -> bias is undefined");
  CHECK_THROWS_WITH_FRAGMENT(Block()(x, {}), ValueError, "the block has no steps");
  CHECK_THROWS_WITH_FRAGMENT(Block().conv2d().relu().forward_pieces(x, {randn({2, 4, 3, 3})}), ShapeError,
                             "[conv2d] input has 3 channels but weight expects 4");
}

}  // namespace loom
