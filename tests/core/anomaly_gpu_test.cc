// File: tests/core/anomaly_gpu_test.cc
// Anomaly mode on the GPU: the checks read device values back, in NCHW and
// channels-last, and name the same op and module as on the CPU.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/anomaly.h"
#include "core/autograd.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/core/anomaly_modules.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using testing::ShiftedLog;
using testing::SqrtOfZero;

// Conv2d(2, 4, 3) on the GPU in `format`, then `tail` as child "1".
template <class M>
nn::Sequential conv_model(M tail, MemoryFormat format) {
  nn::Sequential net(nn::Conv2d(2, 4, 3), nn::ReLU(), std::move(tail));
  net.to(testing::test_gpu());
  net.to(format);
  return net;
}

Tensor gpu_input(MemoryFormat format) {
  return full({2, 2, 6, 6}, 0.5).to(testing::test_gpu()).contiguous(format);
}

}  // namespace

LOOM_GPU_TEST_CASE("anomaly mode on the GPU: a forward NaN inside a module, NCHW and channels-last") {
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    nn::Sequential net = conv_model(ShiftedLog(100.0), format);
    AnomalyGuard anomaly;
    CHECK_THROWS_WITH_FRAGMENT(net(gpu_input(format)), NonFiniteError,
                               "the forward of 'log' in 2 (ShiftedLog) produced NaN");
  }
}

LOOM_GPU_TEST_CASE("anomaly mode on the GPU: a backward inf names the op and its module") {
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    nn::Sequential net = conv_model(SqrtOfZero(), format);
    AnomalyGuard anomaly;
    Tensor loss = sum(net(gpu_input(format)));
    CHECK(loss.item() == 0.0);
    CHECK_THROWS_WITH_FRAGMENT(loss.backward(), NonFiniteError,
                               "the backward of 'sqrt' (recorded in 2 (SqrtOfZero)) produced inf");
  }
}

LOOM_GPU_TEST_CASE("anomaly mode on the GPU: a finite training step passes, gradients as without it") {
  nn::Sequential net = conv_model(ShiftedLog(-1.0), MemoryFormat::ChannelsLast);
  Tensor x = gpu_input(MemoryFormat::ChannelsLast);
  sum(net(x)).backward();
  Tensor expected = net.parameters()[0].grad().cpu();
  net.zero_grad();
  {
    AnomalyGuard anomaly;
    sum(net(x)).backward();
  }
  CHECK_CLOSE(net.parameters()[0].grad().cpu(), expected, 1e-5, 1e-6);  // cuDNN may pick another plan
}
