// File: core/cudnn/plan_memory.h
// What plan selection may spend in device memory: which of an op's own tensors
// a test run on the calling thread binds as they are (instead of scratch
// copies), and how large a candidate's workspace may be and still be preferred.
// No CUDA here, so both rules are unit-tested on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::cudnn {

// One tensor of a graph as the op binds it: its UID and the bytes it spans.
struct BoundRange {
  int64_t uid = 0;
  uintptr_t begin = 0;
  size_t bytes = 0;
};

// For each range, whether test runs may bind it as it is. The calling thread
// selects a plan just before the op's real run: its inputs are only read, and
// its outputs (no graph accumulates into one: every alpha/beta is 1/0) are
// written again by that run, so the scratch copies a build would bind cost
// memory for nothing. A range that shares bytes with another does not qualify:
// an op updating a tensor in place (batch norm's running statistics, bound as
// both input and output) would see each test run's update, so those, and only
// those, get scratch copies.
std::vector<bool> bindable_as_is(const std::vector<BoundRange>& ranges);

// Below this, a workspace is never too large (a few MiB of workspace is what
// most engines ask for, and a small op's own tensors say little).
constexpr size_t kWorkspaceFloor = size_t{64} << 20;

// The largest workspace a candidate plan may ask for and still be taken ahead
// of the others: twice the bytes of the op's own tensors, at least
// kWorkspaceFloor. The fastest wgrad engine for few channels on large planes
// asks for about the operands' size (a U-Net's 16 -> 16 channels at 64x64,
// batch 512, tf32: 258 MiB of workspace for 256 MiB of tensors, 0.56 ms against
// 0.89 ms for the best engine under 1x; H200, cuDNN 9.19). Some engines (FFT,
// non-fused Winograd) ask for many times their operands' size, tens of GB for
// VGG's 224-pixel convolutions; they are tried only when no candidate under
// the limit works.
size_t preferred_workspace_limit(size_t tensor_bytes);
// The limit where every allowed engine is timed (strict fp32, plan.cc's
// times_every_candidate): there the FFT engines are often the only fast ones
// (resnet9 at batch 128 ran 47.9 ms per step without them, 9.9 ms with them,
// on an H200), so the limit is what the device can spare, half its free
// memory, as PyTorch's cudnn.benchmark times whatever it can allocate.
size_t timed_workspace_limit(size_t tensor_bytes, size_t device_free_bytes);
bool workspace_preferred(int64_t workspace_bytes, size_t limit);

}  // namespace loom::cudnn
