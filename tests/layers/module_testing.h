// File: tests/layers/module_testing.h
// Helpers the layer tests share.
#pragma once

#include <string>
#include <vector>

#include "layers/module.h"

namespace loom::testing {

// The module's state_dict names, in order.
inline std::vector<std::string> state_dict_names(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  return names;
}

}  // namespace loom::testing
