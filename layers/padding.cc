// File: layers/padding.cc
// The 2-D padding modules forward to loom::pad with (left, right, top, bottom).
#include "layers/padding.h"

#include <fmt/format.h>

#include <utility>

#include "layers/repr.h"

namespace loom::nn {

Pad2d::Pad2d(std::string type_name, PadMode mode, Padding4 padding, std::optional<double> value)
    : type_name_(std::move(type_name)), mode_(mode), padding_(padding), value_(value) {}

Tensor Pad2d::forward(const Tensor& x) {
  return pad(x, {padding_.left, padding_.right, padding_.top, padding_.bottom}, mode_, value());
}

std::string Pad2d::extra_repr() const {
  const std::string sizes =
      fmt::format("({}, {}, {}, {})", padding_.left, padding_.right, padding_.top, padding_.bottom);
  return value_ ? fmt::format("padding={}, value={}", sizes, python_float(*value_)) : sizes;
}

}  // namespace loom::nn
