// File: tests/core/autograd_memory_test.cc
// The saved-tensor accounting: bytes per op that releasing a graph frees, each
// saved tensor counted once, against the counts worked out by hand for small nets.
#include "core/autograd_memory.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/activation.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/fused.h"
#include "core/ops/norm.h"
#include "core/ops/reduction.h"
#include "core/storage_stats.h"
#include "tests/testing.h"

namespace loom {
namespace {

// N 2, C 3, H W 8, K 4: the conv's output (2, 4, 8, 8) in float32 is 2048 bytes.
constexpr size_t kActivationBytes = 2 * 4 * 8 * 8 * sizeof(float);

struct SmallNet {
  Generator gen{7};
  Tensor x = randn({2, 3, 8, 8}, {}, &gen);
  Tensor w = randn({4, 3, 3, 3}, {.requires_grad = true}, &gen);
  Tensor gamma = ones({4}, {.requires_grad = true});
  Tensor beta = zeros({4}, {.requires_grad = true});
  Tensor running_mean = zeros({4}), running_var = ones({4});

  Tensor conv() const { return conv2d(x, w, Tensor(), {.padding = 1}); }
  Tensor bn(const Tensor& y) const { return batch_norm(y, running_mean, running_var, gamma, beta); }
};

size_t bytes_of(const std::vector<SavedTensorBytes>& rows, const std::string& op) {
  for (const SavedTensorBytes& row : rows) {
    if (row.op == op) return row.bytes;
  }
  FAIL("no row for ", op);
  return 0;
}

TEST_CASE("storage_bytes_in_use follows CPU storages as they are made and freed") {
  const size_t before = storage_bytes_in_use(DeviceType::CPU);
  {
    Tensor t = empty({3, 5});
    CHECK(storage_bytes_in_use(DeviceType::CPU) == before + 3 * 5 * sizeof(float));
    Tensor view = t.slice(0, 0, 1);  // a view shares the storage: nothing more
    CHECK(storage_bytes_in_use(DeviceType::CPU) == before + 3 * 5 * sizeof(float));
  }
  CHECK(storage_bytes_in_use(DeviceType::CPU) == before);
}

TEST_CASE("conv, batch_norm, relu: what each node saves, counted by what releasing it frees") {
  SmallNet net;
  const size_t before = storage_bytes_in_use(DeviceType::CPU);
  Tensor loss = mean(relu(net.bn(net.conv())));
  const std::vector<SavedTensorBytes> rows = release_saved_tensors(loss);
  // relu saves its output; batch_norm its input (the conv's output) and the
  // batch mean and 1/std (4 floats each); conv2d only x, which the test holds
  // (no weight: x needs no gradient); mean nothing.
  CHECK(bytes_of(rows, "relu") == kActivationBytes);
  CHECK(bytes_of(rows, "batch_norm") == kActivationBytes + 2 * 4 * sizeof(float));
  CHECK(bytes_of(rows, "conv2d") == 0);
  CHECK(bytes_of(rows, "mean") == 0);
  CHECK(rows.front().op == "batch_norm");  // largest first
  CHECK(total_bytes(rows) == 2 * kActivationBytes + 2 * 4 * sizeof(float));
  // Only the loss is left of the step.
  CHECK(storage_bytes_in_use(DeviceType::CPU) == before + sizeof(float));
  CHECK_THROWS_AS(loss.backward(), AutogradError);
}

TEST_CASE("a tensor two nodes save is counted once, for the earlier node in the forward") {
  SmallNet net;
  Tensor z = relu(net.conv());
  Tensor loss = mean(mul(z, z));  // mul saves both operands: z twice, the storage relu saved
  z = Tensor();                   // only the graph holds it now
  const std::vector<SavedTensorBytes> rows = release_saved_tensors(loss);
  CHECK(bytes_of(rows, "mul") == 0);
  CHECK(bytes_of(rows, "relu") == kActivationBytes);
  CHECK(total_bytes(rows) == kActivationBytes);
}

TEST_CASE("a residual add saves nothing: its operands are held by no one else") {
  SmallNet net;
  // The batch norm's output and the second conv's output reach only the add,
  // whose backward needs their sizes alone, so the graph holds neither.
  Tensor loss = mean(add(net.bn(net.conv()), net.conv()));
  const std::vector<SavedTensorBytes> rows = release_saved_tensors(loss);
  CHECK(bytes_of(rows, "add") == 0);
  CHECK(total_bytes(rows) == kActivationBytes + 2 * 4 * sizeof(float));  // batch_norm's
}

// A projection shortcut's output (here a second conv's) reaches only the fused
// norm's add. ReLU's derivative reads the output, so the residual is not kept.
// SiLU's reads bn(x) + z, which the CPU's forward keeps (as the one-by-one ops
// do) beside the residual, which a GPU backward recomputes it from. ReLU6's
// reads y on the CPU (Loom's kernel) and bn(x) + z in cuDNN's fused backward.
TEST_CASE("a fused batch norm + residual + activation keeps the residual only where the derivative needs it") {
  for (ActivationKind kind : {ActivationKind::Relu, ActivationKind::Relu6, ActivationKind::Silu}) {
    CAPTURE(kernel::activation_info(kind).name);
    SmallNet net;
    Tensor loss = mean(batch_norm_activation(net.conv(), net.running_mean, net.running_var, net.gamma, net.beta, {},
                                             kind, {}, net.conv()));
    const std::vector<SavedTensorBytes> rows = release_saved_tensors(loss);
    const size_t statistics = 2 * 4 * sizeof(float);  // the batch mean and 1/std
    // x and y; ReLU6: and z; SiLU: and z and bn(x) + z
    const size_t activations = kind == ActivationKind::Relu ? 2 : kind == ActivationKind::Relu6 ? 3 : 4;
    CHECK(bytes_of(rows, "batch_norm_activation") == activations * kActivationBytes + statistics);
  }
}

// PyTorch's hardtanh saves its input; Loom keeps the output, which gives the same
// gradient, and which the next conv keeps as its input anyway: one tensor, not two.
TEST_CASE("relu6 and hardtanh keep their output, which the next conv keeps too") {
  for (ActivationKind kind : {ActivationKind::Relu6, ActivationKind::Hardtanh}) {
    CAPTURE(kernel::activation_info(kind).name);
    SmallNet net;
    const Tensor w2 = randn({4, 4, 3, 3}, {.requires_grad = true}, &net.gen);
    Tensor loss = mean(conv2d(activation(net.bn(net.conv()), kind, {}), w2, Tensor(), {.padding = 1}));
    const std::vector<SavedTensorBytes> rows = release_saved_tensors(loss);
    CHECK(bytes_of(rows, "batch_norm") == kActivationBytes + 2 * 4 * sizeof(float));  // the conv's output
    CHECK(total_bytes(rows) == 2 * kActivationBytes + 2 * 4 * sizeof(float));
  }
}

TEST_CASE("release_saved_tensors names what it needs when given a tensor without a graph") {
  Tensor leaf = ones({2}, {.requires_grad = true});
  CHECK_THROWS_WITH_FRAGMENT(release_saved_tensors(leaf), AutogradError, "has no autograd graph");
  CHECK_THROWS_AS(release_saved_tensors(Tensor()), AutogradError);
}

}  // namespace
}  // namespace loom
