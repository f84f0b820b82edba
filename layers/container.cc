// File: layers/container.cc
// Sequential and Residual run their children in registration order.
#include "layers/container.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/ops/elementwise.h"

namespace loom::nn {

namespace {

Tensor chain(const NamedModules& modules, const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, module] : modules) y = (*module)(y);
  return y;
}

}  // namespace

Tensor Sequential::forward(const Tensor& x) { return chain(named_children(), x); }

std::shared_ptr<Module> Sequential::ptr(size_t index) const {
  LOOM_CHECK(index < size(), IndexError,
             "[Sequential] index {} is out of range for a Sequential of {} modules", index, size());
  return named_children()[index].second;
}

std::shared_ptr<Module> ModuleList::ptr(size_t index) const {
  LOOM_CHECK(index < size(), IndexError,
             "[ModuleList] index {} is out of range for a ModuleList of {} modules", index, size());
  return modules_[index];
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [key, module] : named_children()) {
    if (key == name) return true;
  }
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, module] : named_children()) out.push_back(key);
  return out;
}

std::shared_ptr<Module> ModuleDict::ptr(const std::string& name) const {
  for (const auto& [key, module] : named_children()) {
    if (key == name) return module;
  }
  throw IndexError(fmt::format("[ModuleDict] no module named \"{}\"; the keys are: {}", name,
                               fmt::join(keys(), ", ")));
}

Tensor Residual::forward(const Tensor& x) {
  const Tensor y = chain(named_children(), x);
  LOOM_CHECK(y.sizes() == x.sizes(), ShapeError,
             "[Residual] the branch maps shape {} to {}; a residual block must keep the shape",
             shape_str(x.sizes()), shape_str(y.sizes()));
  return x + y;
}

}  // namespace loom::nn
