// File: layers/module.h
// Module: the base of every layer. It owns named parameters (tensors that
// require grad), buffers (state such as BatchNorm's running statistics) and
// child modules, all in registration order, so that the dotted names of
// state_dict() are PyTorch's ("0.weight", "1.running_mean", "3.a.0.weight").
//
//   nn::Sequential net(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::BatchNorm2d(32), nn::ReLU());
//   net.to(Device::cuda());           // moves every parameter and buffer in place
//   Tensor y = net(x);                // calls forward
//   net.load_state_dict(pytorch_weights);
//   std::cout << net;                 // PyTorch's repr plus the parameter count
//
// Modules are held by std::shared_ptr<Module> inside containers. Copying a
// module copies handles: the copy shares the original's parameters, as copying
// a shared_ptr would.
//
// A model of your own registers its children and keeps the typed handles, as in
// libtorch; type_name() needs no override (it is derived from the class name):
//
//   class Net : public nn::Module {
//    public:
//     Net() {
//       conv1_ = register_module("conv1", nn::Conv2d(1, 8, 3, {.padding = 1}));
//       fc_ = register_module("fc", std::make_shared<nn::Linear>(8 * 14 * 14, 10));
//     }
//     Tensor forward(const Tensor& x) override { return fc_->forward(...); }
//    private:
//     std::shared_ptr<nn::Conv2d> conv1_;  // state_dict: "conv1.weight", "conv1.bias"
//     std::shared_ptr<nn::Linear> fc_;
//   };
//
// std::make_shared cannot forward a braced list such as {.padding = 1} (a
// braced list has no type to deduce), so with make_shared name the options
// type: std::make_shared<nn::Conv2d>(1, 8, 3, nn::Conv2dOptions{.padding = 1}).
// register_module(name, nn::Conv2d(1, 8, 3, {.padding = 1})) takes the layer
// value directly and returns the same typed shared_ptr.
//
// Other forward signatures (several inputs or outputs): declare them in the
// subclass, e.g. `std::pair<Tensor, Tensor> forward(const Tensor& a, const
// Tensor& b);`, and call `module->forward(a, b)`. Such a module keeps the base's
// one-tensor forward, which throws a TypeError that says so; it
// cannot sit inside a Sequential (a Sequential passes one tensor from child to
// child). In profile and anomaly mode its children are still named by their
// full path ("up1.conv"), found from the nearest ancestor called through
// operator(); `module->call(a, [&] { return module->forward(a, b); })` runs the
// call as operator() would, so that a leaf gets a profile row of its own.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/anomaly.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/profiler.h"
#include "core/shape.h"
#include "core/state_dict.h"
#include "core/tensor.h"
#include "core/trace.h"

namespace loom::nn {

class Module;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

class Module {
 public:
  virtual ~Module() = default;

  // The one-tensor forward that operator(), Sequential and Residual call. The
  // default throws TypeError: a module whose forward takes other
  // arguments (or a pure container: ModuleList, ModuleDict) is called directly.
  virtual Tensor forward(const Tensor& x);
  // Calls forward. In profile mode (core/profiler.h) a leaf module times its
  // forward into the row "<dotted path> <type>", e.g. "3.a.0 Conv2d"; in
  // anomaly mode (core/anomaly.h) the ops it records are named by that path, and
  // so are the ops a trace records (core/trace.h, Op::module).
  Tensor operator()(const Tensor& x) {
    return call(x, [&] { return forward(x); });
  }
  // operator() for a forward of this module that takes more than `x` (a fused
  // head's forward_residual, say): runs `run`, which computes it, under the
  // module's name, profile row, trace and anomaly scopes as operator() runs
  // forward(x). Without it such a call has no row of its own: its forward goes
  // untimed and its backward lands in "(other)".
  template <class Run>
  Tensor call(const Tensor& x, Run&& run) {
    if (!Profiler::enabled() && !anomaly_mode_enabled() && !trace::active()) return run();
    return tracked_call(x, std::function<Tensor()>(std::forward<Run>(run)));
  }

  // --- what the module holds, recursively, in registration order ---------------
  // Each parameter once, even when a module is shared (as PyTorch's parameters()).
  std::vector<Tensor> parameters() const;
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  std::vector<std::shared_ptr<Module>> children() const;  // direct children only
  const NamedModules& named_children() const { return children_; }
  // Every descendant, parents before their children ("3", "3.a", "3.a.0", ...),
  // each once; the module itself is not included.
  NamedModules named_modules() const;
  int64_t num_parameters() const;  // total elements of parameters()

  // --- mode and placement -------------------------------------------------------
  // Training mode for this module and all its children (BatchNorm, Dropout read it).
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Converts every parameter and buffer (and a parameter's grad) in place, as
  // PyTorch's `param.data = ...`: tensors obtained earlier, e.g. by an
  // optimizer, see the new device, dtype or layout. to(DType) converts only
  // floating tensors (num_batches_tracked stays int64) and needs a floating
  // dtype; to(MemoryFormat) takes Contiguous or ChannelsLast and changes only
  // 4-D tensors (conv weights).
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(MemoryFormat format);

  // Sets every parameter's grad to undefined (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  // --- checkpoints ----------------------------------------------------------------
  // Parameters then buffers of each module, then its children's, with dotted names.
  // The tensors share memory with the module but carry no autograd history.
  StateDict state_dict() const;
  // Copies values in place (no grad recorded). Every name must match unless
  // strict is false (then missing ones keep their values and unknown ones are
  // ignored); shapes and dtypes must always match. Nothing is written unless
  // everything checks out. Throws ValueError (names), ShapeError or TypeError.
  void load_state_dict(const StateDict& state, bool strict = true);

  // --- printing -----------------------------------------------------------------
  // "Conv2d": by default the class's own name without namespaces or template
  // arguments (`class Net` prints as "Net"); override it to print another.
  virtual std::string type_name() const;
  virtual std::string extra_repr() const { return ""; }  // "1, 32, kernel_size=(3, 3), ..."
  std::string repr() const;                              // as PyTorch's print(model)
  std::string str() const;  // repr() plus a "Total parameters: 421,834" line

 protected:
  Module() = default;
  Module(const Module&) = default;
  Module(Module&&) = default;
  Module& operator=(const Module&) = default;
  Module& operator=(Module&&) = default;

  // Registers `value` as a parameter (a leaf that requires grad) and returns the
  // handle to keep as a member. Names are unique per module and have no dots.
  Tensor register_parameter(std::string name, const Tensor& value);
  Tensor register_buffer(std::string name, const Tensor& value);
  // Registers a child and returns it with its own type, to keep as a member:
  //   conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(1, 8, 3));
  template <class M>
  requires std::derived_from<M, Module>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  // The same for a layer value, moved into a new shared_ptr:
  //   conv1_ = register_module("conv1", nn::Conv2d(1, 8, 3, {.padding = 1}));
  template <class M>
  requires std::derived_from<std::remove_cvref_t<M>, Module>
  std::shared_ptr<std::remove_cvref_t<M>> register_module(std::string name, M&& module) {
    return register_module(std::move(name),
                           std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }

 private:
  enum class Held { Parameters, Buffers, Both };

  void check_new_name(const std::string& name) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  Tensor tracked_call(const Tensor& x, const std::function<Tensor()>& run);
  // Every (prefixed name, tensor) of this module's tree of the kind asked for.
  void collect(const std::string& prefix, Held held, NamedTensors& out) const;
  void collect_modules(const std::string& prefix, NamedModules& out) const;
  template <class Convert>
  Module& convert_tensors(Convert convert);

  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  NamedModules children_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

// A layer value (moved into a new shared_ptr) or a shared_ptr to one.
template <class M>
concept ModuleValue = std::derived_from<std::remove_cvref_t<M>, Module>;

template <class P>
concept ModulePointer = requires(const P& p) {
  { p.get() } -> std::convertible_to<Module*>;
}
&&std::is_same_v<std::remove_cvref_t<P>,
                 std::shared_ptr<typename std::remove_cvref_t<P>::element_type>>;

template <class M>
concept ModuleArg = ModuleValue<M> || ModulePointer<M>;

template <ModuleArg M>
std::shared_ptr<Module> share_module(M&& module) {
  if constexpr (ModuleValue<M>) {
    return std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module));
  } else {
    return module;
  }
}

}  // namespace loom::nn
