// File: tests/core/trace_test.cc
// The op recorder: what it records (outermost ops, their inputs, outputs,
// attributes and modules), what it leaves out (nested ops, aliases), that
// nothing is recorded without a recorder, and that Keep::Shapes keeps stand-ins
// in place of the forward's intermediates.
#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "core/storage_stats.h"
#include "core/trace.h"
#include "layers/nn.h"
#include "tests/testing.h"

using namespace loom;

TEST_CASE("a recorder sees the outermost ops with their tensors and attributes") {
  Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}), b = randn({4});
  trace::Recorder recorder;
  Tensor y = relu(conv2d(x, w, b, {.stride = 2, .padding = 1}));
  Tensor z = y.flatten(1);
  const std::vector<trace::Op>& ops = recorder.ops();
  REQUIRE(ops.size() == 3);  // conv2d's kernel calls and flatten's view are inside, not beside
  CHECK(ops[0].name == "conv2d");
  CHECK(ops[0].inputs.size() == 3);
  CHECK(ops[0].inputs[0].is_same(x));
  CHECK(ops[0].get_ints("stride") == std::vector<int64_t>{2, 2});
  CHECK(ops[0].get_ints("padding") == std::vector<int64_t>{1, 1});
  CHECK(ops[0].get_int("groups") == 1);
  CHECK(ops[1].name == "relu");
  CHECK(ops[1].inputs[0].is_same(ops[0].outputs[0]));
  CHECK(ops[2].name == "reshape");
  CHECK(ops[2].get_ints("shape") == std::vector<int64_t>{2, 4 * 4 * 4});
  CHECK(ops[2].outputs[0].is_same(z));
  CHECK(ops[0].str().find("conv2d (2, 3, 8, 8)") == 0);
}

TEST_CASE("aliases of an input and ops outside a recorder are not recorded") {
  Tensor x = randn({2, 5});
  {
    trace::Recorder recorder;
    Tensor same = dropout(x, 0.5, /*training=*/false);  // x itself
    Tensor c = x.contiguous();                          // x itself
    CHECK(same.is_same(x));
    CHECK(c.is_same(x));
    CHECK(recorder.ops().empty());
  }
  CHECK_FALSE(trace::active());
  trace::Recorder again;  // the first one is gone: a new one may start
  CHECK(again.ops().empty());
}

TEST_CASE("recorders do not nest, and attribute lookups name what is missing") {
  trace::Recorder recorder;
  CHECK_THROWS_WITH_FRAGMENT(trace::Recorder(), ValueError, "traces do not nest");
  Tensor y = softmax(randn({2, 3}), -1);
  REQUIRE(recorder.ops().size() == 1);
  const trace::Op& op = recorder.ops()[0];
  CHECK(op.get_int("dim") == 1);  // normalized
  CHECK_THROWS_WITH_FRAGMENT(op.get_int("axis"), ValueError, "has no attribute 'axis' (it has dim)");
  CHECK_THROWS_WITH_FRAGMENT(op.get_ints("dim"), ValueError, "is an integer, not a list of integers");
}

TEST_CASE("ops carry the path of the module whose forward ran them") {
  nn::Sequential net(nn::Linear(4, 3), nn::ReLU(), nn::Sequential(nn::Linear(3, 2)));
  trace::Recorder recorder;
  net(randn({5, 4}));
  const std::vector<trace::Op>& ops = recorder.ops();
  REQUIRE(ops.size() == 3);
  CHECK(ops[0].name == "linear");
  CHECK(ops[0].module == "0");
  CHECK(ops[1].module == "1");
  CHECK(ops[2].module == "2.0");
}

TEST_CASE("in-place updates are recorded with no output, so a consumer can refuse them") {
  Tensor x = randn({3});
  trace::Recorder recorder;
  Tensor y = add(x, 1.0);
  add_(y, x);
  REQUIRE(recorder.ops().size() == 2);
  CHECK(recorder.ops()[0].name == "add_scalar");
  CHECK(recorder.ops()[0].get_double("scalar") == 1.0);
  CHECK(recorder.ops()[1].name == "add_");
  CHECK(recorder.ops()[1].outputs.empty());
}

TEST_CASE("Keep::Shapes records stand-ins, so the forward's intermediates are freed as without a recorder") {
  Tensor x = randn({64, 1024}), w = randn({1024, 1024});
  const size_t before = storage_bytes_in_use(DeviceType::CPU);
  auto held_after_forward = [&](trace::Keep keep) {
    trace::Recorder recorder(keep);
    Tensor y = sigmoid(relu(add(matmul(x, w), 1.0)));  // three 256 KiB intermediates dropped
    const size_t held = storage_bytes_in_use(DeviceType::CPU) - before;
    const std::vector<trace::Op>& ops = recorder.ops();
    REQUIRE(ops.size() == 4);
    for (size_t i = 1; i < ops.size(); ++i) CHECK(ops[i].inputs[0].is_same(ops[i - 1].outputs[0]));
    CHECK(ops[0].inputs[0].is_same(x));  // inputs no recorded op made stay themselves
    CHECK(ops[0].inputs[1].is_same(w));
    CHECK(recorder.recorded(y).is_same(ops[3].outputs[0]));
    CHECK(recorder.recorded(x).is_same(x));
    CHECK(ops[2].outputs[0].sizes() == Shape{64, 1024});
    CHECK(ops[2].outputs[0].strides() == Shape{1024, 1});
    CHECK(ops[2].outputs[0].dtype() == DType::Float32);
    CHECK(recorder.recorded(y).is_same(y) == (keep == trace::Keep::Values));
    return held;
  };
  const size_t one = 64 * 1024 * sizeof(float);
  CHECK(held_after_forward(trace::Keep::Values) == 4 * one);
  CHECK(held_after_forward(trace::Keep::Shapes) == one);  // y alone
}
