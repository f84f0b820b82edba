// File: core/ops/conv_internal.h
// What conv2d (conv.cc) and the fused conv ops (fused.cc, fusion.cc) share below the op
// boundary: the kernel parameters, the layout rules, and the device dispatch of
// the forward / dgrad / wgrad / bias-grad kernels. Private to core/ops.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#pragma once

#include "core/cpu/conv.h"
#include "core/ops/conv.h"
#include "core/tensor.h"
#include "core/trace.h"

namespace loom::conv_detail {

kernel::ConvParams conv_params(const Conv2dOptions& o);

// What a trace records of a conv2d: stride, padding, dilation (each [h, w]) and groups.
std::vector<trace::Attribute> conv_attributes(const Conv2dOptions& o);

// conv2d's argument checks (dtypes, devices, options, channels,
// bias), for every op that takes conv2d's arguments; throws with "[conv2d] ..."
// messages.
void check_conv2d_args(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& o);
// y (N, K, P, Q) for valid arguments; throws ShapeError when it would be empty.
Shape output_sizes(const Tensor& x, const Tensor& w, const Conv2dOptions& o);

// PyTorch's CPU and cuDNN convolutions run channels-last when either operand
// suggests it, and return their results in that layout. When neither says
// (a one-channel image and its filter), the GPU picks channels-last, its native
// layout, so that the layers after the first conv stay NHWC.
MemoryFormat output_format(const Tensor& x, const Tensor& w);

// The layout the kernels compute in: cuDNN and the CPU's oneDNN tier take
// either, so they compute in the output's layout and save two copies; the CPU
// reference kernels want NCHW.
MemoryFormat kernel_format(const Tensor& x, MemoryFormat output);

// A kernel operand in `format`, detached (it feeds a kernel only, so it needs no
// graph node; without a copy it still shares storage with t); undefined stays so.
Tensor kernel_input(const Tensor& t, MemoryFormat format);

// Every operand in the kernel layout, on one device:
// y (N, K, P, Q) = conv(x, w) + bias (bias may be undefined)
void forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const kernel::ConvParams& p);
// The CPU's forward: oneDNN, else the reference kernel (through NCHW copies
// where the operands are channels-last); then max(y, 0) when relu, in the
// same pass.
void cpu_forward_kernel(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const kernel::ConvParams& p, bool relu);
// dx (N, C, H, W) = dgrad(dy, w)
void dgrad_kernel(const Tensor& dx, const Tensor& dy, const Tensor& w, const kernel::ConvParams& p);
// dw (K, C/groups, R, S) = wgrad(dy, x)
void wgrad_kernel(const Tensor& dw, const Tensor& dy, const Tensor& x, const kernel::ConvParams& p);
// y (N, K, P, Q) += bias (K), in place; y in the kernel layout, bias detached.
void add_bias_kernel(const Tensor& y, const Tensor& bias);
// db (K) = sum of dy (N, K, P, Q) over N, P and Q.
void bgrad_kernel(const Tensor& db, const Tensor& dy);
// dw = wgrad(dy, x) and db = bgrad(dy), either undefined to skip it: one
// pass over dy for both where the small-channel tier takes them.
void weight_grads_kernel(const Tensor& dw, const Tensor& db, const Tensor& dy, const Tensor& x,
                         const kernel::ConvParams& p);

}  // namespace loom::conv_detail
