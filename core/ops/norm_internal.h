// File: core/ops/norm_internal.h
// The argument checks every per-channel norm shares (batch_norm, batch_norm_relu,
// instance_norm): one check, so their messages and rules cannot drift apart.
//
// N batch, C channels.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace loom::norm_detail {

// The dtype of the per-channel tensors: x's own, or float32 for a bfloat16 /
// float16 x (GPU, as autocast makes), whose math then runs in float32.
DType channel_dtype(const Tensor& x);
// channel_dtype(x) on x's device, contiguous.
TensorOptions channel_options(const Tensor& x);

// v: undefined, or (C) of channel_dtype(x) on x's device (a weight, bias or
// running statistic of `op`, called `name` in the message).
void check_channel_operand(std::string_view op, const Tensor& v, std::string_view name, const Tensor& x);

// `op`'s arguments: x (N, C, ...) of a float dtype; weight, bias, running_mean,
// running_var undefined or (C) of channel_dtype(x) on x's device; the running
// statistics given together, and given in eval mode (training = false); more
// than one value per channel when training. Throws the loom::Error subclass
// that names what is wrong, with the values.
void check_channel_norm_args(std::string_view op, const Tensor& x, const Tensor& running_mean,
                             const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                             bool training);

}  // namespace loom::norm_detail
