// File: tests/core/ops/fusion_parity.h
// The fusion GPU tests' parity check (fusion_*_gpu_test): each block fused and
// unfused (FusionGuard off) against the CPU's one-by-one evaluation, forward
// and every input gradient, NCHW and channels-last, under the policies given
// (strict fp32 / tf32 / bf16 autocast). Each check prints one line
// "BLOCK block layout policy fused fwd=... bwd=... pieces=... backward=...".
// A head's backward (its steps' derivative chain) must name its tier in the
// report, and the tier must agree with the fused-graph counters.
//
// Plans are built lazily and settled: check_blocks first runs each of its
// blocks in every given policy and layout once, which queues each runtime-
// compiled graph on the background builders, then waits for them and swaps
// them in; the checked runs then meet only built plans (checked: no key starts
// lazily during them), the plans an eager build would pick. cuDNN compiles one
// graph at a time per process (0.7-2.9 s each on the H100), however many
// builders wait: one binary with every conv block and policy queued over 70
// compiles for one case and ran for minutes. So the conv matrix is split over
// binaries, one per family and policy (fusion_{rows1,rows2,chains}_{strict,tf32,
// bf16}_gpu_test), which compile concurrently as separate processes.
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). Under tf32 and
// bf16 a gradient may instead pass as a few decision flips (testing::decision_flips).
#pragma once

#ifdef LOOM_WITH_CUDA
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops/fusion.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom::fusion_parity {

struct Case {
  fusion::Block block;
  std::vector<Tensor> inputs;  // x, then the block's operands (undefined: not given)
};

// Every case's plans built, then every case checked (doctest CHECKs) under each policy.
void check_blocks(const std::vector<Case>& cases, const std::vector<testing::ParityPolicy>& policies, Generator& gen);

// The conv families (N batch, C in channels, H, W, K out channels):
// conv2d + bias + each activation row (relu: the fused op conv2d_bias_relu) of
// one half of kernel::kActivationKinds (half 0: the first, 1: the rest), so two
// binaries per policy share the rows.
std::vector<Case> conv_activation_cases(Generator& gen, int half);
// Batch norm + activation + residual, a user chain gelu(scale * conv(x) + shift),
// chains with a mul by a scalar, a scale-bias and a residual.
std::vector<Case> conv_chain_cases(Generator& gen);

// A head's backward notes begin with one of these (the tiers, best first).
constexpr const char* kBackwardTiers[] = {"derivative fused into dgrad/wgrad (engine",
                                          "derivative as one graph (engine", "derivative unfused: "};
// Which of kBackwardTiers a note names (std::size(kBackwardTiers): none).
size_t tier_of(const std::string& note);

// How the head's backward ran in the block's latest run (the report's note), or "".
std::string head_backward_note(const fusion::Block& block);

}  // namespace loom::fusion_parity

#endif  // LOOM_WITH_CUDA
