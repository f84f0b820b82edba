// File: layers/conv_transpose.cc
// ConvTranspose2d: argument checks at construction, PyTorch-default
// initialisation, and a forward through loom::conv_transpose2d.
// C in channels, K out channels, R, S filter.
#include "layers/conv_transpose.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/conv_transpose.h"
#include "layers/init.h"

namespace loom::nn {

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_{.stride = options.stride,
               .padding = options.padding,
               .output_padding = options.output_padding,
               .dilation = options.dilation,
               .groups = options.groups} {
  LOOM_CHECK(in_channels > 0 && out_channels > 0 && options.groups > 0 &&
                 in_channels % options.groups == 0 && out_channels % options.groups == 0,
             ValueError,
             "[ConvTranspose2d] in_channels ({}) and out_channels ({}) must be positive and "
             "divisible by groups ({})",
             in_channels, out_channels, options.groups);
  LOOM_CHECK(kernel_size.h > 0 && kernel_size.w > 0, ValueError,
             "[ConvTranspose2d] kernel_size must be positive, got {}", kernel_size.pair_str());
  // weight (C, K/groups, R, S): PyTorch's layout for transposed convolutions
  weight_ = register_parameter("weight", empty({in_channels, out_channels / options.groups,
                                                kernel_size.h, kernel_size.w}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_channels}));
  reset_parameters(options.generator);
}

// PyTorch computes fan_in from the weight's dim 1 here too (K/groups * R * S).
void ConvTranspose2d::reset_parameters(Generator* generator) {
  init::default_weight_and_bias_(weight_, bias_, generator);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return conv_transpose2d(x, weight_, bias_, options_);
}

// PyTorch's _ConvNd.extra_repr: defaults other than stride are left out.
std::string ConvTranspose2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              kernel_size_.pair_str(), options_.stride.pair_str());
  if (options_.padding != Size2(0)) s += ", padding=" + options_.padding.pair_str();
  if (options_.output_padding != Size2(0)) {
    s += ", output_padding=" + options_.output_padding.pair_str();
  }
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.pair_str();
  if (options_.groups != 1) s += fmt::format(", groups={}", options_.groups);
  if (!bias_.defined()) s += ", bias=False";
  return s;
}

}  // namespace loom::nn
