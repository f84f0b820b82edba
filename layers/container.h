// File: layers/container.h
// Containers: Sequential chains layers, Residual adds its input to a branch,
// ModuleList and ModuleDict hold modules that a parent's forward calls itself.
//
//   nn::Sequential net(nn::Conv2d(1, 6, 5, {.padding = 2}), nn::ReLU(), nn::MaxPool2d(2));
//   net.push_back(nn::Flatten());
//   auto& conv = net.at<nn::Conv2d>(0);
//
//   // torch_ref.py's Residual: children "a" and "b", forward x + b(a(x))
//   nn::Residual block(conv_bn(128, 128), conv_bn(128, 128));
//
//   // as torch.nn.ModuleList / ModuleDict: state_dict names "layers.0.weight",
//   // "heads.digits.weight" when registered as "layers" and "heads"
//   auto layers = register_module("layers", nn::ModuleList(nn::Linear(4, 8), nn::Linear(8, 8)));
//   for (const auto& layer : *layers) x = (*layer)(x);
//   auto heads = register_module("heads", nn::ModuleDict());
//   heads->insert("digits", nn::Linear(8, 10));
//   Tensor logits = heads->at<nn::Linear>("digits")(x);
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Children named "0", "1", ... in order. Each argument is a layer value
  // (moved in) or a shared_ptr to one. A single Sequential argument is copied
  // or moved, not nested: push_back it to nest it.
  template <ModuleArg... Ms>
  requires(sizeof...(Ms) >= 1 &&
           !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, Sequential> &&
                                    ...))) explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <ModuleArg M>
  void push_back(M&& module) {
    register_module(std::to_string(size()), share_module(std::forward<M>(module)));
  }

  // Applies the children in order; an empty Sequential returns x.
  Tensor forward(const Tensor& x) override;

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  Module& operator[](size_t index) const { return *ptr(index); }
  std::shared_ptr<Module> ptr(size_t index) const;  // IndexError past the end
  // The child at `index` as its layer type: TypeError if it is not an M.
  template <class M>
  M& at(size_t index) const;

  std::string type_name() const override { return "Sequential"; }
};

class Residual : public Module {
 public:
  // x + inner(x); the child is named "inner".
  template <ModuleArg M>
  requires(!std::is_same_v<std::remove_cvref_t<M>, Residual>) explicit Residual(M&& inner) {
    register_module("inner", share_module(std::forward<M>(inner)));
  }
  // x + b(a(x)), with children "a" and "b" as torch_ref.py's Residual, so
  // state_dict names match PyTorch's ("3.a.0.weight").
  template <ModuleArg A, ModuleArg B>
  Residual(A&& a, B&& b) {
    register_module("a", share_module(std::forward<A>(a)));
    register_module("b", share_module(std::forward<B>(b)));
  }

  Tensor forward(const Tensor& x) override;  // the branch must keep x's shape
  std::string type_name() const override { return "Residual"; }
};

// Modules in order, named "0", "1", ...; no forward of its own (calling it
// throws TypeError): the parent's forward iterates over it.
class ModuleList : public Module {
 public:
  using const_iterator = std::vector<std::shared_ptr<Module>>::const_iterator;

  ModuleList() = default;
  template <ModuleArg... Ms>
  requires(sizeof...(Ms) >= 1 &&
           !(sizeof...(Ms) == 1 && (std::is_same_v<std::remove_cvref_t<Ms>, ModuleList> &&
                                    ...))) explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <ModuleArg M>
  void push_back(M&& module) {
    register_module(std::to_string(size()), share_module(std::forward<M>(module)));
    modules_.push_back(named_children().back().second);
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const_iterator begin() const { return modules_.begin(); }
  const_iterator end() const { return modules_.end(); }
  Module& operator[](size_t index) const { return *ptr(index); }
  std::shared_ptr<Module> ptr(size_t index) const;  // IndexError past the end
  template <class M>
  M& at(size_t index) const;  // TypeError if the child is not an M

  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name, in insertion order; the names are the state_dict's
// ("heads.digits.weight"). No forward of its own, as ModuleList.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;

  // ValueError when the name is taken, empty or contains a '.'.
  template <ModuleArg M>
  void insert(std::string name, M&& module) {
    register_module(std::move(name), share_module(std::forward<M>(module)));
  }

  size_t size() const { return named_children().size(); }
  bool contains(const std::string& name) const;
  std::vector<std::string> keys() const;
  const NamedModules& items() const { return named_children(); }
  Module& operator[](const std::string& name) const { return *ptr(name); }
  std::shared_ptr<Module> ptr(const std::string& name) const;  // IndexError lists the keys
  template <class M>
  M& at(const std::string& name) const;  // TypeError if the child is not an M

  std::string type_name() const override { return "ModuleDict"; }
};

// The child `child` (found at `where`) as an M, or TypeError naming both types.
template <class M>
M& child_as(const std::shared_ptr<Module>& child, std::string_view container,
            const std::string& where) {
  auto* typed = dynamic_cast<M*>(child.get());
  LOOM_CHECK(typed != nullptr, TypeError, "[{}.at] child {} is a {}, not the type asked for",
             container, where, child->type_name());
  return *typed;
}

template <class M>
M& Sequential::at(size_t index) const {
  return child_as<M>(ptr(index), "Sequential", std::to_string(index));
}

template <class M>
M& ModuleList::at(size_t index) const {
  return child_as<M>(ptr(index), "ModuleList", std::to_string(index));
}

template <class M>
M& ModuleDict::at(const std::string& name) const {
  return child_as<M>(ptr(name), "ModuleDict", "\"" + name + "\"");
}

}  // namespace loom::nn
