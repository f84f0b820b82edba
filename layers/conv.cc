// File: layers/conv.cc
// Conv2d: argument checks at construction, its padding resolved as PyTorch's,
// PyTorch-default initialisation, and a forward through loom::conv2d.
// N batch, C in channels, K out channels, R, S filter.
#include "layers/conv.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/ops/conv.h"
#include "core/ops/pad.h"
#include "layers/init.h"

namespace loom::nn {

namespace {

// What Conv1d and Conv2d share: the channels, groups and padding_mode.
void check_channels(std::string_view layer, int64_t in_channels, int64_t out_channels, int64_t groups,
                    PadMode padding_mode) {
  LOOM_CHECK(in_channels > 0 && out_channels > 0, ValueError,
             "[{}] in_channels and out_channels must be positive, got {} and {}", layer, in_channels,
             out_channels);
  LOOM_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, ValueError,
             "[{}] groups ({}) must be positive and divide in_channels ({}) and out_channels ({})", layer, groups,
             in_channels, out_channels);
  LOOM_CHECK(padding_mode == PadMode::Constant || padding_mode == PadMode::Reflect ||
                 padding_mode == PadMode::Replicate,
             ValueError, "[{}] unknown padding_mode {}", layer, static_cast<int>(padding_mode));
}

void check_conv_args(int64_t in_channels, int64_t out_channels, Size2 kernel,
                     const Conv2dOptions& o) {
  check_channels("Conv2d", in_channels, out_channels, o.groups, o.padding_mode);
  LOOM_CHECK(kernel.h > 0 && kernel.w > 0, ValueError,
             "[Conv2d] kernel_size must be positive, got {}", kernel.pair_str());
  LOOM_CHECK(o.stride.h > 0 && o.stride.w > 0, ValueError,
             "[Conv2d] stride must be positive, got {}", o.stride.pair_str());
  LOOM_CHECK(o.padding.amount.h >= 0 && o.padding.amount.w >= 0, ValueError,
             "[Conv2d] padding must be non-negative, got {}", o.padding.amount.pair_str());
  LOOM_CHECK(o.dilation.h > 0 && o.dilation.w > 0, ValueError,
             "[Conv2d] dilation must be positive, got {}", o.dilation.pair_str());
  LOOM_CHECK(o.padding.kind != Padding::Same || o.stride == Size2(1), ValueError,
             "[Conv2d] padding=same needs stride 1 (as in PyTorch), got stride {}; give the padding as a number",
             o.stride.pair_str());
}

void check_conv1d_args(int64_t in_channels, int64_t out_channels, int64_t kernel, const Conv1dOptions& o) {
  check_channels("Conv1d", in_channels, out_channels, o.groups, o.padding_mode);
  LOOM_CHECK(kernel > 0 && o.stride > 0 && o.dilation > 0, ValueError,
             "[Conv1d] kernel_size, stride and dilation must be positive, got {}, {} and {}", kernel, o.stride,
             o.dilation);
  LOOM_CHECK(o.padding.kind || (o.padding.amount.h == o.padding.amount.w && o.padding.amount.w >= 0), ValueError,
             "[Conv1d] padding is one non-negative number (or Padding::Same / Valid), got {}",
             o.padding.amount.pair_str());
  LOOM_CHECK(o.padding.kind != Padding::Same || o.stride == 1, ValueError,
             "[Conv1d] padding=same needs stride 1 (as in PyTorch), got stride {}; give the padding as a number",
             o.stride);
}

// How the layer pads: the zeros the convolution itself adds on both sides, and
// the pads loom::pad adds to the input first (empty when none).
struct LayerPadding {
  Size2 conv = 0;
  std::vector<int64_t> input_pads;
};

// PyTorch's rules: "same" pads dilation * (R - 1) in all, the odd pixel at the
// end; zeros on uneven sides pad the difference first, then convolve with the
// smaller side; another padding_mode pads everything first.
LayerPadding resolve_padding(Size2 kernel, const Conv2dOptions& o) {
  Size2 before = o.padding.kind ? Size2(0) : o.padding.amount, after = before;
  if (o.padding.kind == Padding::Same) {
    const Size2 total(o.dilation.h * (kernel.h - 1), o.dilation.w * (kernel.w - 1));
    before = Size2(total.h / 2, total.w / 2);
    after = Size2(total.h - before.h, total.w - before.w);
  }
  if (o.padding_mode != PadMode::Constant) {
    if (before == Size2(0) && after == Size2(0)) return {};
    return {.conv = 0, .input_pads = {before.w, after.w, before.h, after.h}};
  }
  if (before == after) return {.conv = before, .input_pads = {}};
  return {.conv = before, .input_pads = {0, after.w - before.w, 0, after.h - before.h}};
}

const char* padding_mode_name(PadMode mode) { return mode == PadMode::Constant ? "zeros" : pad_mode_name(mode); }

// Conv1d's padding by Conv2d's rules for a (1, R) filter: its pads along W,
// the only ones it has.
LayerPadding resolve_padding_1d(int64_t kernel, const Conv1dOptions& o) {
  const ConvPadding rows = o.padding.kind ? ConvPadding(*o.padding.kind) : ConvPadding(0, o.padding.amount.w);
  LayerPadding padding = resolve_padding(
      Size2(1, kernel), {.padding = rows, .dilation = Size2(1, o.dilation), .padding_mode = o.padding_mode});
  if (!padding.input_pads.empty()) padding.input_pads.resize(2);  // (left, right); the rows' pads are 0
  return padding;
}

// ", padding=same", ", padding=valid", ", padding=<amount>" or nothing for 0,
// as PyTorch's _ConvNd.extra_repr; `amount` prints a given number.
std::string padding_repr(const ConvPadding& padding, const std::string& amount) {
  if (padding.kind) return padding.kind == Padding::Same ? ", padding=same" : ", padding=valid";
  return padding.amount == Size2(0) ? "" : ", padding=" + amount;
}

// The end of both reprs: groups, bias and padding_mode where not the defaults.
std::string repr_tail(int64_t groups, bool bias, PadMode padding_mode) {
  std::string s;
  if (groups != 1) s += fmt::format(", groups={}", groups);
  if (!bias) s += ", bias=False";
  if (padding_mode != PadMode::Constant) s += fmt::format(", padding_mode={}", padding_mode_name(padding_mode));
  return s;
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_{.stride = options.stride, .padding = 0, .dilation = options.dilation, .groups = options.groups},
      padding_(options.padding),
      padding_mode_(options.padding_mode) {
  check_conv_args(in_channels, out_channels, kernel_size, options);
  LayerPadding padding = resolve_padding(kernel_size, options);
  options_.padding = padding.conv;
  input_pads_ = std::move(padding.input_pads);
  // weight (K, C/groups, R, S)
  weight_ = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_channels}));
  reset_parameters(options.generator);
}

void Conv2d::reset_parameters(Generator* generator) {
  init::default_weight_and_bias_(weight_, bias_, generator);
}

Tensor Conv2d::padded_input(const Tensor& x) const {
  return input_pads_.empty() ? x : pad(x, input_pads_, padding_mode_);
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(padded_input(x), weight_, bias_, options_); }

// PyTorch's _ConvNd.extra_repr: defaults other than stride are left out.
std::string Conv2d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels_, out_channels_,
                              kernel_size_.pair_str(), options_.stride.pair_str());
  s += padding_repr(padding_, padding_.amount.pair_str());
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.pair_str();
  return s + repr_tail(options_.groups, bias_.defined(), padding_mode_);
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_{.stride = options.stride, .padding = 0, .dilation = options.dilation, .groups = options.groups},
      padding_(options.padding),
      padding_mode_(options.padding_mode) {
  check_conv1d_args(in_channels, out_channels, kernel_size, options);
  LayerPadding padding = resolve_padding_1d(kernel_size, options);
  options_.padding = padding.conv.w;
  input_pads_ = std::move(padding.input_pads);
  // weight (K, C/groups, R)
  weight_ = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_channels}));
  reset_parameters(options.generator);
}

void Conv1d::reset_parameters(Generator* generator) { init::default_weight_and_bias_(weight_, bias_, generator); }

Tensor Conv1d::forward(const Tensor& x) {
  return conv1d(input_pads_.empty() ? x : pad(x, input_pads_, padding_mode_), weight_, bias_, options_);
}

// As PyTorch prints Conv1d: one-element tuples, "(3,)".
std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels_, out_channels_, kernel_size_,
                              options_.stride);
  s += padding_repr(padding_, fmt::format("({},)", padding_.amount.w));
  if (options_.dilation != 1) s += fmt::format(", dilation=({},)", options_.dilation);
  return s + repr_tail(options_.groups, bias_.defined(), padding_mode_);
}

}  // namespace loom::nn
