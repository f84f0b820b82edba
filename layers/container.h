// File: layers/container.h
// Containers: Sequential chains layers, Residual adds its input to a branch.
//
//   nn::Sequential net(nn::Conv2d(1, 6, 5, {.padding = 2}), nn::ReLU(), nn::MaxPool2d(2));
//   net.push_back(nn::Flatten());
//   auto& conv = net.at<nn::Conv2d>(0);
//
//   // torch_ref.py's Residual: children "a" and "b", forward x + b(a(x))
//   nn::Residual block(conv_bn(128, 128), conv_bn(128, 128));
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

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

template <class M>
M& Sequential::at(size_t index) const {
  std::shared_ptr<Module> child = ptr(index);
  auto* typed = dynamic_cast<M*>(child.get());
  LOOM_CHECK(typed != nullptr, TypeError,
             "[Sequential.at] child {} is a {}, not the type asked for", index, child->type_name());
  return *typed;
}

}  // namespace loom::nn
