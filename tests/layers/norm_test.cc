// File: tests/layers/norm_test.cc
// BatchNorm2d: batch vs running statistics by mode (against per-channel formulas
// written here), num_batches_tracked, momentum (fixed and cumulative), affine
// and track_running_stats off, errors and printing; LayerNorm, GroupNorm and
// InstanceNorm2d: PyTorch's names, defaults and print, forward as the functional op.
// N batch, C channels, H, W, M = N * H * W values per channel.
#include "layers/norm.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/fusion_trace.h"
#include "core/ops/ops.h"
#include "layers/conv.h"
#include "tests/testing.h"

namespace loom {
namespace {

struct ChannelStats {
  std::vector<double> mean, var;  // var biased
};

// x (N, C, H, W)
ChannelStats channel_stats(const Tensor& x) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2) * x.size(3);
  const double M = static_cast<double>(N * L);
  ChannelStats s{std::vector<double>(C, 0.0), std::vector<double>(C, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t l = 0; l < L; ++l) s.mean[c] += v[(n * C + c) * L + l] / M;
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t l = 0; l < L; ++l) {
        const double d = v[(n * C + c) * L + l] - s.mean[c];
        s.var[c] += d * d / M;
      }
    }
  }
  return s;
}

Tensor vec(const std::vector<double>& values) {
  return tensor(values, {static_cast<int64_t>(values.size())});
}

TEST_CASE("BatchNorm2d starts as PyTorch's: weight 1, bias 0, running stats 0 and 1, count 0") {
  nn::BatchNorm2d bn(3);
  CHECK(bn.weight().to_vector<double>() == std::vector<double>(3, 1.0));
  CHECK(bn.bias().to_vector<double>() == std::vector<double>(3, 0.0));
  CHECK(bn.running_mean().to_vector<double>() == std::vector<double>(3, 0.0));
  CHECK(bn.running_var().to_vector<double>() == std::vector<double>(3, 1.0));
  CHECK(bn.num_batches_tracked().dtype() == DType::Int64);
  CHECK(bn.num_batches_tracked().dim() == 0);
  CHECK(bn.num_batches_tracked().item() == 0);
}

TEST_CASE("BatchNorm2d training: batch statistics, running ones blended with the unbiased var") {
  Generator gen(1);
  nn::BatchNorm2d bn(3, {.momentum = 0.2});
  const Tensor x = randn({4, 3, 2, 5}, {}, &gen) * 2.0 + 1.0;
  const ChannelStats s = channel_stats(x);
  const Tensor y = bn(x);
  const ChannelStats ys = channel_stats(y);
  const double M = 4 * 2 * 5;
  for (int c = 0; c < 3; ++c) {
    CHECK(ys.mean[c] == doctest::Approx(0.0).scale(1.0).epsilon(1e-5));
    CHECK(ys.var[c] == doctest::Approx(s.var[c] / (s.var[c] + 1e-5)).epsilon(1e-4));
    CHECK(bn.running_mean().at({c}) == doctest::Approx(0.2 * s.mean[c]).epsilon(1e-5));
    CHECK(bn.running_var().at({c}) ==
          doctest::Approx(0.8 + 0.2 * s.var[c] * M / (M - 1)).epsilon(1e-5));
  }
  CHECK(bn.num_batches_tracked().item() == 1);
  const Tensor x_nhwc = x.contiguous(MemoryFormat::ChannelsLast);
  nn::BatchNorm2d fresh(3, {.momentum = 0.2});
  CHECK_CLOSE(fresh(x_nhwc), y, 1e-5, 1e-5);
}

TEST_CASE("BatchNorm2d eval: the running statistics, nothing updated") {
  Generator gen(2);
  nn::BatchNorm2d bn(2);
  bn.load_state_dict({{"weight", vec({2, 3})},
                      {"bias", vec({0.5, -1})},
                      {"running_mean", vec({1, -2})},
                      {"running_var", vec({4, 0.25})},
                      {"num_batches_tracked", full({}, 5, {.dtype = DType::Int64})}});
  bn.eval();
  const Tensor x = randn({3, 2, 2, 2}, {}, &gen);
  const Tensor expected =
      batch_norm(x, vec({1, -2}), vec({4, 0.25}), vec({2, 3}), vec({0.5, -1}), {.training = false});
  CHECK_CLOSE(bn(x), expected, 0, 0);
  // Hand-checked: channel 0 of the first element, (x - 1) / sqrt(4 + eps) * 2 + 0.5.
  CHECK(bn(x).at({0, 0, 0, 0}) ==
        doctest::Approx((x.at({0, 0, 0, 0}) - 1) / std::sqrt(4 + 1e-5) * 2 + 0.5));
  CHECK(bn.running_mean().to_vector<double>() == std::vector<double>{1, -2});
  CHECK(bn.num_batches_tracked().item() == 5);
}

TEST_CASE("num_batches_tracked counts training batches, following loads and writes") {
  Generator gen(3);
  nn::BatchNorm2d bn(2);
  const Tensor x = randn({2, 2, 3, 3}, {}, &gen);
  bn(x);
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 2);
  bn.eval();
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 2);
  bn.train();
  StateDict state = bn.state_dict();
  state[4].second = full({}, 41, {.dtype = DType::Int64});
  bn.load_state_dict(state);
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 42);
  Tensor counter = bn.state_dict()[4].second;  // shares memory with the buffer
  counter.fill_(100);
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 101);
  bn.reset_running_stats();
  bn(x);
  CHECK(bn.num_batches_tracked().item() == 1);
  // A batch that cannot be normalized (one value per channel) is not counted.
  CHECK_THROWS_AS(bn(x.slice(0, 0, 1).slice(2, 0, 1).slice(3, 0, 1)), ValueError);
  CHECK(bn.num_batches_tracked().item() == 1);
}

TEST_CASE("BatchNorm2d and BatchNorm1d take an empty batch in training, traced or not, as PyTorch") {
  nn::BatchNorm2d bn2(3);
  CHECK(bn2(zeros({0, 3, 4, 4})).sizes() == Shape{0, 3, 4, 4});
  nn::BatchNorm1d bn1(5);
  CHECK(bn1(zeros({0, 5})).sizes() == Shape{0, 5});
  for (const nn::Module* m : std::vector<const nn::Module*>{&bn2, &bn1}) {
    const nn::NamedTensors buffers = m->named_buffers();
    CHECK(buffers[0].second.to_vector<double>() == std::vector<double>(buffers[0].second.numel(), 0.0));
    CHECK(buffers[1].second.to_vector<double>() == std::vector<double>(buffers[1].second.numel(), 1.0));
    CHECK(buffers[2].second.item() == 1);  // counted, as PyTorch counts it
  }
  // A user's conv -> batch norm -> ReLU, traced: the chain runs as one block,
  // which hands the empty batch to batch_norm's answer.
  Generator gen(9);
  nn::Conv2d conv(3, 4, 3, {.padding = 1, .generator = &gen});
  nn::BatchNorm2d bn(4);
  fusion::Traced traced([&](const Tensor& x) { return relu(bn(conv(x))); });
  for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(std::string(memory_format_name(format)));
    conv.zero_grad();
    const Tensor x = zeros({0, 3, 8, 8}).contiguous(format);
    const Tensor y = traced(x);
    REQUIRE(traced.plan().chains().size() == 1);
    CHECK(y.sizes() == Shape{0, 4, 8, 8});
    sum(traced(x)).backward();
    CHECK(bn.running_mean().to_vector<double>() == std::vector<double>(4, 0.0));
    CHECK(bn.running_var().to_vector<double>() == std::vector<double>(4, 1.0));
    REQUIRE(conv.weight().grad().defined());
    CHECK(max(abs(conv.weight().grad())).item() == 0);
    REQUIRE(bn.weight().grad().defined());
    CHECK(max(abs(bn.weight().grad())).item() == 0);
  }
}

TEST_CASE("BatchNorm2d momentum nullopt averages all batches equally") {
  Generator gen(4);
  nn::BatchNorm2d bn(2, {.momentum = std::nullopt});
  const Tensor a = randn({2, 2, 3, 3}, {}, &gen), b = randn({2, 2, 3, 3}, {}, &gen) + 3.0;
  bn(a);
  bn(b);
  const ChannelStats sa = channel_stats(a), sb = channel_stats(b);
  for (int c = 0; c < 2; ++c) {
    CHECK(bn.running_mean().at({c}) ==
          doctest::Approx((sa.mean[c] + sb.mean[c]) / 2).epsilon(1e-5));
  }
}

TEST_CASE("BatchNorm2d without affine or without running statistics") {
  Generator gen(5);
  const Tensor x = randn({3, 2, 2, 2}, {}, &gen);
  nn::BatchNorm2d plain(2, {.affine = false});
  CHECK(plain.named_parameters().empty());
  CHECK(plain.named_buffers().size() == 3);
  CHECK_CLOSE(plain(x), batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor()), 0, 0);

  nn::BatchNorm2d untracked(2, {.track_running_stats = false});
  CHECK(untracked.named_buffers().empty());
  CHECK_FALSE(untracked.num_batches_tracked().defined());
  CHECK(untracked.state_dict().size() == 2);
  const Tensor train_out = untracked(x);
  untracked.eval();  // still batch statistics: there are no running ones
  CHECK_CLOSE(untracked(x), train_out, 0, 0);
}

TEST_CASE("BatchNorm2d errors") {
  CHECK_THROWS_WITH_FRAGMENT(nn::BatchNorm2d(0), ValueError,
                             "[BatchNorm2d] num_features must be positive, got 0");
  CHECK_THROWS_WITH_FRAGMENT(nn::BatchNorm2d(2, {.momentum = 1.5}), ValueError,
                             "momentum must be in [0, 1]");
  CHECK_THROWS_WITH_FRAGMENT(nn::BatchNorm2d(2, {.eps = -1}), ValueError,
                             "eps must be non-negative, got -1");
  nn::BatchNorm2d bn(2);
  CHECK_THROWS_WITH_FRAGMENT(bn(zeros({4, 2, 3})), ShapeError,
                             "[BatchNorm2d] expects input (N, C, H, W), got shape (4, 2, 3)");
  CHECK_THROWS_WITH_FRAGMENT(bn(zeros({4, 3, 2, 2})), ShapeError,
                             "input of shape (4, 3, 2, 2) has 3 channels, but the layer was "
                             "built for 2");
  CHECK(bn.num_batches_tracked().item() == 0);
}

TEST_CASE("BatchNorm2d prints as PyTorch's") {
  CHECK(nn::BatchNorm2d(32).repr() ==
        "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  CHECK(nn::BatchNorm2d(
            8,
            {.eps = 0.001, .momentum = std::nullopt, .affine = false, .track_running_stats = false})
            .repr() ==
        "BatchNorm2d(8, eps=0.001, momentum=None, affine=False, track_running_stats=False)");
  CHECK(nn::BatchNorm2d(8, {.momentum = 1}).repr().find("momentum=1.0,") != std::string::npos);
}

TEST_CASE("LayerNorm: PyTorch's parameters, state_dict names and print; forward is layer_norm") {
  nn::LayerNorm ln({4, 5});
  const StateDict state = ln.state_dict();
  REQUIRE(state.size() == 2);
  CHECK(state[0].first == "weight");
  CHECK(state[1].first == "bias");
  CHECK_CLOSE(ln.weight(), ones({4, 5}), 0, 0);
  CHECK_CLOSE(ln.bias(), zeros({4, 5}), 0, 0);
  CHECK(ln.repr() == "LayerNorm((4, 5), eps=1e-05, elementwise_affine=True)");
  CHECK(nn::LayerNorm({8}, {.bias = false}).repr() == "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=False)");
  CHECK(nn::LayerNorm({8}, {.elementwise_affine = false}).parameters().empty());
  Generator gen(7);
  const Tensor x = randn({3, 4, 5}, {}, &gen);
  CHECK_CLOSE(ln(x), layer_norm(x, {4, 5}, ln.weight(), ln.bias()), 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(nn::LayerNorm(Shape{}), ValueError, "[LayerNorm] normalized_shape must name");
}

TEST_CASE("GroupNorm: PyTorch's parameters, state_dict names and print; forward is group_norm") {
  nn::GroupNorm gn(2, 6);
  const StateDict state = gn.state_dict();
  REQUIRE(state.size() == 2);
  CHECK(state[0].first == "weight");
  CHECK(state[1].first == "bias");
  CHECK_CLOSE(gn.weight(), ones({6}), 0, 0);
  CHECK_CLOSE(gn.bias(), zeros({6}), 0, 0);
  CHECK(gn.repr() == "GroupNorm(2, 6, eps=1e-05, affine=True)");
  CHECK(nn::GroupNorm(3, 6, {.affine = false}).parameters().empty());
  Generator gen(8);
  const Tensor x = randn({3, 6, 4, 5}, {}, &gen);
  {
    NoGradGuard no_grad;
    Tensor(gn.weight()).copy_(randn({6}, {}, &gen));
    Tensor(gn.bias()).copy_(randn({6}, {}, &gen));
  }
  CHECK_CLOSE(gn(x), group_norm(x, 2, gn.weight(), gn.bias()), 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(nn::GroupNorm(4, 6), ValueError, "num_channels=6 and num_groups=4");
  CHECK_THROWS_WITH_FRAGMENT(gn(zeros({3, 4, 2, 2})), ShapeError, "[GroupNorm] expects input (N, 6, ...)");
}

TEST_CASE("InstanceNorm2d: PyTorch's defaults, names and print; running statistics in eval when tracked") {
  nn::InstanceNorm2d plain(4);
  CHECK(plain.state_dict().empty());
  CHECK(plain.repr() == "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
  nn::InstanceNorm2d in(4, {.affine = true, .track_running_stats = true});
  const StateDict state = in.state_dict();
  REQUIRE(state.size() == 5);
  const std::vector<std::string> names = {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
  for (size_t i = 0; i < names.size(); ++i) CHECK(state[i].first == names[i]);
  CHECK_CLOSE(in.running_var(), ones({4}), 0, 0);
  Generator gen(9);
  const Tensor x = randn({2, 4, 3, 5}, {}, &gen);
  CHECK_CLOSE(plain(x), instance_norm(x), 0, 0);
  Tensor expected_mean = zeros({4}), expected_var = ones({4});
  const Tensor y = in(x);  // training: the instances' statistics, running ones blended
  CHECK_CLOSE(y, instance_norm(x, expected_mean, expected_var, in.weight(), in.bias()), 0, 0);
  CHECK_CLOSE(in.running_mean(), expected_mean, 0, 0);
  CHECK_CLOSE(in.running_var(), expected_var, 0, 0);
  in.eval();
  CHECK_CLOSE(in(x), batch_norm(x, in.running_mean(), in.running_var(), in.weight(), in.bias(),
                                {.training = false}),
              1e-6, 1e-6);
  plain.eval();  // untracked: the instances' statistics in eval mode too
  CHECK_CLOSE(plain(x), instance_norm(x), 0, 0);
  CHECK_THROWS_WITH_FRAGMENT(in(zeros({4, 3, 5})), ShapeError, "[InstanceNorm2d] expects input (N, 4, H, W)");
}

}  // namespace
}  // namespace loom
