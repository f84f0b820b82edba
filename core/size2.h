// File: core/size2.h
// Size2: a (height, width) pair written as one int when both are equal, as
// PyTorch's 2-D arguments: conv2d(x, w, b, {.padding = 1}), {.stride = {2, 1}},
// nn::Conv2d(1, 32, 3, {.padding = 1}).
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>

namespace loom {

struct Size2 {
  int64_t h;
  int64_t w;

  Size2(int64_t both) : h(both), w(both) {}  // implicit: `.padding = 1` means (1, 1)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}

  bool operator==(const Size2&) const = default;
  bool square() const { return h == w; }
  std::array<int64_t, 2> array() const { return {h, w}; }
  // "(3, 3)", as PyTorch prints a pair.
  std::string pair_str() const { return fmt::format("({}, {})", h, w); }
  // "3" when square, else "(3, 1)": how PyTorch prints an argument it kept as given.
  std::string str() const { return square() ? fmt::format("{}", h) : pair_str(); }
};

}  // namespace loom
