// File: tests/core/cudnn/graph_conv_layout_test.cc
// Graph::conv without a GPU: beside a channels-last-only operand, the operands
// dense in both layouts (depthwise filters, 1 x 1 maps, one channel) are
// described as channels-last, over random shapes, layouts and directions; with
// none, every description stays as given.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdint>
#include <random>
#include <vector>

#include "core/cudnn/graph.h"
#include "core/shape.h"

using namespace loom;
using namespace loom::cudnn;

namespace {

bool dense_as(const Shape& dims, const Shape& strides, MemoryFormat format) {
  return has_layout(dims, strides, format);
}

// As spec_of describes a dense tensor: NCHW wherever the NCHW strides fit.
TensorSpec described(int64_t uid, const Shape& dims, MemoryFormat format) {
  const Shape nchw = strides_for(dims, MemoryFormat::Contiguous);
  const bool either = dense_as(dims, nchw, MemoryFormat::ChannelsLast);
  return {.uid = uid, .dims = dims, .strides = either ? nchw : strides_for(dims, format)};
}

bool channels_last_only(const TensorSpec& s) {
  return dense_as(s.dims, s.strides, MemoryFormat::ChannelsLast) &&
         !dense_as(s.dims, s.strides, MemoryFormat::Contiguous);
}

const TensorSpec& spec(const Graph& g, int64_t uid) {
  for (const TensorSpec& s : g.tensors()) {
    if (s.uid == uid) return s;
  }
  FAIL("no tensor with uid ", uid);
  return g.tensors().front();
}

}  // namespace

TEST_CASE("Graph::conv: a depthwise filter beside NHWC data is described as NHWC") {
  Graph g;
  g.add_tensor(described(1, {8, 96, 16, 16}, MemoryFormat::ChannelsLast));
  g.add_tensor(described(2, {96, 1, 3, 3}, MemoryFormat::ChannelsLast));
  g.add_tensor(described(3, {8, 96, 16, 16}, MemoryFormat::ChannelsLast));
  CHECK(spec(g, 2).strides == Shape{9, 9, 3, 1});  // spec_of's NCHW description
  g.conv(ConvDirection::Forward, 1, 2, 3, {.pad_h = 1, .pad_w = 1, .groups = 96}, CUDNN_DATA_FLOAT);
  CHECK(spec(g, 2).strides == Shape{9, 1, 3, 1});
  CHECK(spec(g, 1).strides == Shape{96 * 256, 1, 96 * 16, 96});
}

TEST_CASE("Graph::conv: ambiguous operands follow a channels-last one, over random configurations") {
  std::mt19937 rng(20261130);
  auto pick = [&](std::vector<int64_t> values) {
    return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
  };
  const MemoryFormat formats[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t n = pick({1, 2, 5}), c = pick({1, 3, 16}), k = pick({1, 4, 16});
    const int64_t h = pick({1, 7}), w = pick({1, 9}), side = pick({1, 3});
    const int64_t cin = pick({0, 1}) == 1 ? 1 : c;  // a depthwise-shaped filter or a full one
    const std::vector<Shape> dims = {{n, c, h, w}, {k, cin, side, side}, {n, k, h, w}};
    std::vector<TensorSpec> given;
    Graph g;
    for (int64_t i = 0; i < 3; ++i) {
      given.push_back(described(i + 1, dims[i], formats[pick({0, 1})]));
      g.add_tensor(given.back());
    }
    const auto direction = static_cast<ConvDirection>(pick({0, 1, 2}));
    g.conv(direction, 1, 2, 3, {.groups = c / cin}, CUDNN_DATA_FLOAT);
    bool any_nhwc = false;
    for (const TensorSpec& s : given) any_nhwc = any_nhwc || channels_last_only(s);
    CAPTURE(trial);
    for (const TensorSpec& s : given) {
      const TensorSpec& now = spec(g, s.uid);
      const bool either = dense_as(s.dims, s.strides, MemoryFormat::ChannelsLast) &&
                          dense_as(s.dims, s.strides, MemoryFormat::Contiguous);
      const Shape expected = any_nhwc && either ? strides_for(s.dims, MemoryFormat::ChannelsLast) : s.strides;
      CHECK(now.strides == expected);
      CHECK(now.dims == s.dims);
      // Either way the description covers the same dense bytes.
      CHECK((dense_as(now.dims, now.strides, MemoryFormat::Contiguous) ||
             dense_as(now.dims, now.strides, MemoryFormat::ChannelsLast)));
    }
  }
}
#endif
