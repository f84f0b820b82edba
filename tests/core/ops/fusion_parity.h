// File: tests/core/ops/fusion_parity.h
// The fusion GPU tests' parity check (fusion_gpu_test, fusion_linear_gpu_test):
// each block fused and unfused (FusionGuard off) against the CPU's one-by-one
// evaluation, forward and every input gradient, NCHW and channels-last, strict
// fp32 / tf32 / bf16 autocast. Each check prints one line
// "BLOCK block layout policy fused fwd=... bwd=... pieces=... backward=...".
// A head's backward (its steps' derivative chain) must name its tier in the
// report, and the tier must agree with the fused-graph counters.
//
// Plans are built lazily and settled: check_blocks first runs each of its
// blocks in every policy and layout once, which queues each runtime-compiled
// graph (0.2-1.3 s each on the H100) on the background builders (several
// threads), then waits for them and swaps them in; the checked runs then meet
// only built plans (checked: no key starts lazily during them), the plans an
// eager build would pick. Built one by one, eagerly, the checks took over 7 min.
//
// Errors are normalized: max |gpu - cpu| / max(max |cpu|, 1). Under tf32 and
// bf16 a gradient may instead pass as a few decision flips (testing::decision_flips).
#pragma once

#ifdef LOOM_WITH_CUDA
#include <string>
#include <vector>

#include "core/ops/fusion.h"
#include "core/generator.h"
#include "core/tensor.h"

namespace loom::fusion_parity {

struct Case {
  fusion::Block block;
  std::vector<Tensor> inputs;  // x, then the block's operands (undefined: not given)
};

// Every case's plans built, then every case checked (doctest CHECKs).
void check_blocks(const std::vector<Case>& cases, Generator& gen);

// A head's backward notes begin with one of these (the tiers, best first).
constexpr const char* kBackwardTiers[] = {"derivative fused into dgrad/wgrad (engine",
                                          "derivative as one graph (engine", "derivative unfused: "};
// Which of kBackwardTiers a note names (std::size(kBackwardTiers): none).
size_t tier_of(const std::string& note);

// How the head's backward ran in the block's latest run (the report's note), or "".
std::string head_backward_note(const fusion::Block& block);

}  // namespace loom::fusion_parity

#endif  // LOOM_WITH_CUDA
