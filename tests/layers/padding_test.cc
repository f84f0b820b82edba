// File: tests/layers/padding_test.cc
// The 2-D padding modules: each equals loom::pad with its mode, sizes and
// value, in both layouts; PyTorch's repr; a gradient through them; errors.
#include "layers/padding.h"

#include <doctest/doctest.h>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/container.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("the 2-D pad modules equal pad with their mode, sizes and value, in both layouts") {
  Generator gen(61);
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    const Tensor x = randn({2, 3, 4, 5}, {}, &gen).contiguous(format);
    CHECK_CLOSE(nn::ZeroPad2d(2)(x), pad(x, {2, 2, 2, 2}), 0, 0);
    CHECK_CLOSE(nn::ZeroPad2d({0, 1, 2, -1})(x), pad(x, {0, 1, 2, -1}), 0, 0);
    CHECK_CLOSE(nn::ConstantPad2d({1, 0, 0, 2}, 3.5)(x), pad(x, {1, 0, 0, 2}, PadMode::Constant, 3.5), 0, 0);
    CHECK_CLOSE(nn::ReflectionPad2d(3)(x), pad(x, {3, 3, 3, 3}, PadMode::Reflect), 0, 0);
    CHECK_CLOSE(nn::ReplicationPad2d({1, 2, 3, 4})(x), pad(x, {1, 2, 3, 4}, PadMode::Replicate), 0, 0);
    CHECK(nn::ReflectionPad2d(1)(x).is_contiguous(format));
  }
  // By hand on one row: reflect mirrors about the edge, replicate repeats it.
  const Tensor row = tensor({1, 2, 3}, {1, 1, 1, 3});
  CHECK(nn::ReflectionPad2d({2, 1, 0, 0})(row).to_vector<double>() == std::vector<double>{3, 2, 1, 2, 3, 2});
  CHECK(nn::ReplicationPad2d({2, 1, 0, 0})(row).to_vector<double>() == std::vector<double>{1, 1, 1, 2, 3, 3});
  CHECK(nn::ConstantPad2d({1, 0, 0, 0}, -7)(row).to_vector<double>() == std::vector<double>{-7, 1, 2, 3});
}

TEST_CASE("the 2-D pad modules print as PyTorch's, hold no parameters and pass gradients") {
  CHECK(nn::ZeroPad2d(2).repr() == "ZeroPad2d((2, 2, 2, 2))");
  CHECK(nn::ConstantPad2d({1, 0, 0, 2}, 3.5).repr() == "ConstantPad2d(padding=(1, 0, 0, 2), value=3.5)");
  CHECK(nn::ReflectionPad2d({1, 1, 2, 2}).repr() == "ReflectionPad2d((1, 1, 2, 2))");
  CHECK(nn::ReplicationPad2d(1).repr() == "ReplicationPad2d((1, 1, 1, 1))");
  nn::Sequential net;
  net.push_back(nn::ReflectionPad2d(1));
  CHECK(net.parameters().empty());
  Tensor x = ones({1, 1, 2, 2}).requires_grad_(true);
  sum(net.forward(x)).backward();
  // Reflecting a 2x2 input by 1 reads each row and each column twice: each element 4 times.
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 4, 4, 4});
  CHECK_THROWS_WITH_FRAGMENT(nn::ReflectionPad2d(2)(ones({1, 1, 2, 2})), Error,
                             "reflect padding must be smaller than the dim it pads");
}

}  // namespace
}  // namespace loom
