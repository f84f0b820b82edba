// File: core/ops/pad.h
// Padding as torch.nn.functional.pad. `pads` lists (before, after) pairs from
// the last dim backwards: {left, right} pads W, {left, right, top, bottom}
// pads W and H, and so on up to every dim. A negative pad removes elements
// instead (a crop).
//
//   Tensor y = pad(x, {1, 1, 2, 0});                      // (N, C, H, W) -> (N, C, H + 2, W + 2)
//   Tensor r = pad(x, {3, 3, 3, 3}, PadMode::Reflect);    // mirrored about the edge pixel
//   Tensor e = pad(x, {1, 1}, PadMode::Replicate);        // the edge pixel repeated
//   Tensor c = pad(x, {-1, -1}, PadMode::Constant);       // W - 2: one column off each side
//
// Constant writes `value` (converted to x's dtype) into the new elements;
// Reflect reads x mirrored about its edge element (PyTorch's "reflect": 3 2 1
// | 0 1 2 3 | 2 1 0) and needs each pad smaller than the dim it pads; Replicate
// repeats the edge element. Any dtype, any layout (a channels-last x gives a
// channels-last result); differentiable for floating x: each input element
// gets the sum of the gradients of the output elements that read it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu/pad.h"
#include "core/tensor.h"

namespace loom {

using kernel::PadMode;

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::Constant,
           double value = 0.0);

const char* pad_mode_name(PadMode mode);  // "constant", "reflect", "replicate"

}  // namespace loom
