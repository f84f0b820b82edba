// File: core/onednn/pool.h
// 2-D max and average pooling on oneDNN, forward and backward, with PyTorch's
// windows (core/cpu/pool.h): ceil_mode's extra windows become right padding.
// Max pooling's backward reads the forward's workspace (oneDNN's own record of
// each window's argmax), which the op keeps instead of int64 indices; an op
// that must return the indices runs the reference kernels.
//
// N batch, C channels, H, W input plane, P, Q output plane.
//
// x, y, dx, dy are float32 (N, C, ., .), dense channels-last. Each call
// returns false, having written nothing, when the tier is off, oneDNN has no
// fast implementation (or, for count_include_pad, a divisor that differs from
// PyTorch's), or x is NCHW: the reference kernels pool NCHW planes as fast as
// oneDNN 2.6 or faster (backward 1.6x, (64, 32, 28, 28) single thread), where
// on channels-last oneDNN is 4-18x faster than they are.
#pragma once

#include <cstdint>
#include <optional>

#include "core/kernel/pool.h"
#include "core/strided.h"

namespace loom::onednn {

// The workspace bytes a training max pooling of x into y records (0 for
// average pooling or inference), or nothing when oneDNN does not take the
// forward (or, training, the backward): the question to ask before the forward.
// training: a max pooling records its workspace for the backward.
std::optional<int64_t> pool2d_workspace_bytes(const Strided& y, const Strided& x, const kernel::Pool2dParams& params,
                                              bool training);

// y from x; `workspace` (pool2d_workspace_bytes of them, bytes) is written for
// a training max pooling and may be null otherwise.
bool pool2d_forward(const Strided& y, const Strided& x, void* workspace, const kernel::Pool2dParams& params,
                    bool training);

// dx (overwritten) from dy and, for max pooling, the forward's workspace.
bool pool2d_backward(const Strided& dx, const Strided& dy, const void* workspace, const kernel::Pool2dParams& params);

}  // namespace loom::onednn
