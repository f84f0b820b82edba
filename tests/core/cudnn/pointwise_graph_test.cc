// File: tests/core/cudnn/pointwise_graph_test.cc
// The activation backward's pointwise graph without a GPU: with a second
// gradient (autograd's sum, folded in) it adds it into an fp32 virtual tensor
// that the derivative reads; an addend in another layout gives no graph.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdint>
#include <optional>
#include <vector>

#include "core/cudnn/pointwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;
using namespace loom::cudnn;

namespace {

int64_t port(const cudnn::Node& node, cudnnBackendAttributeName_t attribute) {
  for (const auto& [a, uid] : node.ports) {
    if (a == attribute) return uid;
  }
  FAIL("no such port");
  return -1;
}

const TensorSpec& spec(const Graph& g, int64_t uid) {
  for (const TensorSpec& t : g.tensors()) {
    if (t.uid == uid) return t;
  }
  FAIL("no such tensor");
  return g.tensors().front();
}

}  // namespace

TEST_CASE("pointwise_backward_graph: dy alone, and dy + an addend summed in fp32 before the derivative") {
  const Shape s{2, 8, 4, 4};
  Tensor dx = empty(s, {.dtype = DType::BFloat16}), dy = empty(s, {.dtype = DType::BFloat16});
  Tensor y = empty(s, {.dtype = DType::BFloat16}), addend = empty(s, {.dtype = DType::BFloat16});
  const PointwiseMode relu{CUDNN_POINTWISE_RELU_BWD};

  std::optional<Graph> plain = pointwise_backward_graph(relu, dx.strided(), dy.strided(), y.strided());
  REQUIRE(plain);
  CHECK(plain->tensors().size() == 3);
  REQUIRE(plain->nodes().size() == 1);

  std::optional<Graph> summed =
      pointwise_backward_graph(relu, dx.strided(), dy.strided(), y.strided(), addend.strided());
  REQUIRE(summed);
  CHECK(summed->tensors().size() == 5);
  REQUIRE(summed->nodes().size() == 2);
  const cudnn::Node& add = summed->nodes()[0];
  const cudnn::Node& derivative = summed->nodes()[1];
  CHECK(add.mode == CUDNN_POINTWISE_ADD);
  CHECK(derivative.mode == CUDNN_POINTWISE_RELU_BWD);
  const int64_t sum = port(add, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
  CHECK(port(derivative, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC) == sum);
  CHECK(spec(*summed, sum).is_virtual);
  CHECK(spec(*summed, sum).dtype == CUDNN_DATA_FLOAT);
  const int64_t first = port(add, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
  const int64_t second = port(add, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
  CHECK(spec(*summed, first).dims == spec(*summed, second).dims);
  CHECK(spec(*summed, second).dtype == CUDNN_DATA_BFLOAT16);
  CHECK_FALSE(spec(*summed, second).is_virtual);
  CHECK(pointwise_backward_pointers(dx.strided(), dy.strided(), y.strided(), addend.strided()).size() == 4);

  Tensor nhwc_addend = addend.contiguous(MemoryFormat::ChannelsLast);
  CHECK_FALSE(pointwise_backward_graph(relu, dx.strided(), dy.strided(), y.strided(), nhwc_addend.strided()));
}

#endif  // LOOM_WITH_CUDA
