// File: core/onednn/norm.h
// Batch normalization on oneDNN, the same functions as core/cpu/norm.h: the
// statistics and the normalization in one primitive (ReLU after it in the same
// pass when asked), and the backward. The statistics travel as Loom keeps them,
// mean and invstd = 1 / sqrt(var + eps); oneDNN's primitives take a variance,
// so the ones that are given statistics get 1 / invstd^2 with eps = 0.
//
// N batch, C channels, M = N * H * W values per channel.
//
// x, y, dx, dy are float32, (N, C) or channels-last (N, C, H, W), dense in one
// layout; the per-channel vectors (C) may have any stride. An absent weight or
// bias acts as 1 or 0. Each call returns false, having written nothing, when
// the tier is off, oneDNN has no fast implementation, or x is NCHW: there the
// reference kernels, which walk each channel's planes, beat oneDNN 2.6's plain
// NCHW batch norm 1.2-4.6x (single thread, (64, 32, 28, 28)), where on
// channels-last oneDNN is 9-29x faster than they are.
#pragma once

#include <optional>

#include "core/kernel/norm.h"
#include "core/strided.h"

namespace loom::onednn {

// Training: y = bn(x) with the batch statistics, then max(y, 0) when relu;
// save_mean = batch mean, save_invstd = 1 / sqrt(biased var + eps), and
// `running` blended as cpu::batch_norm_batch_stats does.
bool batch_norm_training_forward(const Strided& y, const Strided& save_mean,
                                 const Strided& save_invstd, const Strided& x,
                                 const std::optional<Strided>& weight,
                                 const std::optional<Strided>& bias, double eps,
                                 const std::optional<kernel::RunningStats>& running, bool relu = false);

// y = (x - mean) * invstd * weight + bias with given statistics (eval mode).
bool batch_norm_forward(const Strided& y, const Strided& x, const Strided& mean,
                        const Strided& invstd, const std::optional<Strided>& weight,
                        const std::optional<Strided>& bias);

// dx, and dweight / dbias when given, as cpu::batch_norm_backward (training:
// mean and invstd came from x; eval: they are constants).
bool batch_norm_backward(const Strided& dx, const std::optional<Strided>& dweight,
                         const std::optional<Strided>& dbias, const Strided& dy, const Strided& x,
                         const Strided& mean, const Strided& invstd,
                         const std::optional<Strided>& weight, bool training);

}  // namespace loom::onednn
