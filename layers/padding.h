// File: layers/padding.h
// The 2-D padding modules, as torch.nn's ZeroPad2d, ConstantPad2d,
// ReflectionPad2d and ReplicationPad2d: loom::pad (core/ops/pad.h) of the last
// two dims with a fixed mode, for Sequential and models. No parameters.
//
//   nn::ReflectionPad2d pad(3);                 // CycleGAN's stem, before a 7x7 valid conv
//   nn::ZeroPad2d shift({0, 1, 0, 1});          // (left, right, top, bottom)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops/pad.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

// (left, right, top, bottom), or one size for all four, as PyTorch's padding
// argument of the 2-D pad modules. A negative size crops.
struct Padding4 {
  Padding4(int64_t all) : left(all), right(all), top(all), bottom(all) {}  // implicit: ZeroPad2d(2)
  Padding4(int64_t l, int64_t r, int64_t t, int64_t b) : left(l), right(r), top(t), bottom(b) {}

  int64_t left, right, top, bottom;
};

class Pad2d : public Module {
 public:
  // `type_name` is PyTorch's class name. A fill `value` (Constant mode) given
  // here shows in the repr, as ConstantPad2d's; without one the fill is 0.
  Pad2d(std::string type_name, PadMode mode, Padding4 padding, std::optional<double> value = std::nullopt);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return type_name_; }
  std::string extra_repr() const override;  // "(1, 1, 2, 0)"; ConstantPad2d: "padding=(1, 1, 2, 0), value=3.5"

  PadMode mode() const { return mode_; }
  const Padding4& padding() const { return padding_; }
  double value() const { return value_.value_or(0.0); }

 private:
  std::string type_name_;
  PadMode mode_;
  Padding4 padding_;
  std::optional<double> value_;
};

class ZeroPad2d : public Pad2d {
 public:
  explicit ZeroPad2d(Padding4 padding) : Pad2d("ZeroPad2d", PadMode::Constant, padding) {}
};

class ConstantPad2d : public Pad2d {
 public:
  ConstantPad2d(Padding4 padding, double value) : Pad2d("ConstantPad2d", PadMode::Constant, padding, value) {}
};

// Mirrored about the edge pixel: each pad must be smaller than the dim it pads.
class ReflectionPad2d : public Pad2d {
 public:
  explicit ReflectionPad2d(Padding4 padding) : Pad2d("ReflectionPad2d", PadMode::Reflect, padding) {}
};

class ReplicationPad2d : public Pad2d {
 public:
  explicit ReplicationPad2d(Padding4 padding) : Pad2d("ReplicationPad2d", PadMode::Replicate, padding) {}
};

}  // namespace loom::nn
