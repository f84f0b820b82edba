// File: layers/repr.h
// How Python prints the values in PyTorch's layer reprs, so that Loom's model
// print reads the same: 1e-05, 0.1, 1.0, True, None.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>

namespace loom::nn {

// Python's repr(float): the shortest round-trip digits, always with a '.' or exponent.
inline std::string python_float(double value) {
  std::string s = fmt::format("{}", value);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // 'n': inf and nan
  return s;
}

inline std::string python_float(std::optional<double> value) {
  return value ? python_float(*value) : "None";
}

inline const char* python_bool(bool value) { return value ? "True" : "False"; }

}  // namespace loom::nn
