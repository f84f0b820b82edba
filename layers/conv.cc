// File: layers/conv.cc
// Conv2d: argument checks at construction, PyTorch-default initialisation, and a
// forward through loom::conv2d.
// N batch, C in channels, K out channels, R, S filter.
#include "layers/conv.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/conv.h"
#include "layers/init.h"

namespace loom::nn {

namespace {

void check_conv_args(int64_t in_channels, int64_t out_channels, Size2 kernel,
                     const Conv2dOptions& o) {
  LOOM_CHECK(in_channels > 0 && out_channels > 0, ValueError,
             "[Conv2d] in_channels and out_channels must be positive, got {} and {}", in_channels,
             out_channels);
  LOOM_CHECK(o.groups > 0 && in_channels % o.groups == 0 && out_channels % o.groups == 0,
             ValueError,
             "[Conv2d] groups ({}) must be positive and divide in_channels ({}) and "
             "out_channels ({})",
             o.groups, in_channels, out_channels);
  LOOM_CHECK(kernel.h > 0 && kernel.w > 0, ValueError,
             "[Conv2d] kernel_size must be positive, got {}", kernel.pair_str());
  LOOM_CHECK(o.stride.h > 0 && o.stride.w > 0, ValueError,
             "[Conv2d] stride must be positive, got {}", o.stride.pair_str());
  LOOM_CHECK(o.padding.h >= 0 && o.padding.w >= 0, ValueError,
             "[Conv2d] padding must be non-negative, got {}", o.padding.pair_str());
  LOOM_CHECK(o.dilation.h > 0 && o.dilation.w > 0, ValueError,
             "[Conv2d] dilation must be positive, got {}", o.dilation.pair_str());
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_{.stride = options.stride,
               .padding = options.padding,
               .dilation = options.dilation,
               .groups = options.groups} {
  check_conv_args(in_channels, out_channels, kernel_size, options);
  // weight (K, C/groups, R, S)
  weight_ = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_channels}));
  reset_parameters(options.generator);
}

void Conv2d::reset_parameters(Generator* generator) {
  init::default_weight_and_bias_(weight_, bias_, generator);
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight_, bias_, options_); }

// PyTorch's _ConvNd.extra_repr: defaults other than stride are left out.
std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              kernel_size_.pair_str(), options_.stride.pair_str());
  if (options_.padding != Size2(0)) s += ", padding=" + options_.padding.pair_str();
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.pair_str();
  if (options_.groups != 1) s += fmt::format(", groups={}", options_.groups);
  if (!bias_.defined()) s += ", bias=False";
  return s;
}

}  // namespace loom::nn
