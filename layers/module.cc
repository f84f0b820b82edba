// File: layers/module.cc
// Module: registration, recursive walks with dotted names, in-place conversion,
// state_dict loading with all-or-nothing checks, and PyTorch-style printing.
#include "layers/module.h"

#include <cxxabi.h>
#include <cstdlib>
#include <memory>
#include <fmt/format.h>

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <typeinfo>

#include "core/autograd.h"
#include "core/error.h"

namespace loom::nn {

namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Points `t`'s handle at `value`'s memory. Every copy of the handle (the layer's
// member, the registry, an optimizer's list) shares one TensorImpl, so all of
// them see the new device, dtype or layout; the tensor stays the same leaf.
void rebind(const Tensor& t, const Tensor& value) {
  if (value.is_same(t)) return;
  TensorImpl* impl = t.impl();
  impl->storage = value.storage();
  impl->offset = value.storage_offset();
  impl->sizes = value.sizes();
  impl->strides = value.strides();
  impl->dtype = value.dtype();
}

// "a", "b" -> "\"a\", \"b\"", as PyTorch lists keys.
std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "\"" : ", \"") + name + "\"";
  return out;
}

// Indents every line but the first, so a child's repr nests under its "(name): ".
std::string indent_tail(const std::string& text, int spaces) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out.append(spaces, ' ');
  }
  return out;
}

// "loom::nn::Conv2d" -> "Conv2d", "(anonymous namespace)::Net" -> "Net",
// "Block<3>" -> "Block": the last scope's name without template arguments.
std::string readable_type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  std::string name = status == 0 ? demangled.get() : type.name();
  const size_t template_start = name.find('<');
  if (template_start != std::string::npos) name.resize(template_start);
  const size_t scope = name.rfind("::");
  return scope == std::string::npos ? name : name.substr(scope + 2);
}

// 421834 -> "421,834"
std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

// --- registration -------------------------------------------------------------------

void Module::check_new_name(const std::string& name) const {
  LOOM_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError,
             "[{}] invalid name \"{}\": names are non-empty and contain no '.'", type_name(), name);
  auto taken = [&](const auto& entries) {
    for (const auto& [existing, _] : entries) {
      if (existing == name) return true;
    }
    return false;
  };
  LOOM_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), ValueError,
             "[{}] the name \"{}\" is already registered", type_name(), name);
}

Tensor Module::register_parameter(std::string name, const Tensor& value) {
  check_new_name(name);
  LOOM_CHECK(value.defined(), ValueError, "[{}] parameter \"{}\" is undefined", type_name(), name);
  Tensor parameter = value.detach();
  parameter.requires_grad_(true);
  parameters_.emplace_back(std::move(name), parameter);
  return parameter;
}

Tensor Module::register_buffer(std::string name, const Tensor& value) {
  check_new_name(name);
  LOOM_CHECK(value.defined(), ValueError, "[{}] buffer \"{}\" is undefined", type_name(), name);
  Tensor buffer = value.detach();
  buffers_.emplace_back(std::move(name), buffer);
  return buffer;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name);
  LOOM_CHECK(module != nullptr, ValueError, "[{}] child module \"{}\" is null", type_name(), name);
  children_.emplace_back(std::move(name), std::move(module));
}

// --- defaults -----------------------------------------------------------------------

Tensor Module::forward(const Tensor& x) {
  throw TypeError(fmt::format(
      "[{}] has no forward(const Tensor&) (called with shape {}): a module whose forward "
      "takes other arguments is called as module->forward(...), not through operator() or a "
      "Sequential; ModuleList and ModuleDict hold modules and have no forward",
      type_name(), shape_str(x.sizes())));
}

std::string Module::type_name() const { return readable_type_name(typeid(*this)); }

// --- walks --------------------------------------------------------------------------

void Module::collect(const std::string& prefix, Held held, NamedTensors& out) const {
  if (held != Held::Buffers) {
    for (const auto& [name, t] : parameters_) out.emplace_back(join_name(prefix, name), t);
  }
  if (held != Held::Parameters) {
    for (const auto& [name, t] : buffers_) out.emplace_back(join_name(prefix, name), t);
  }
  for (const auto& [name, child] : children_) child->collect(join_name(prefix, name), held, out);
}

void Module::collect_modules(const std::string& prefix, NamedModules& out) const {
  for (const auto& [name, child] : children_) {
    const std::string path = join_name(prefix, name);
    out.emplace_back(path, child);
    child->collect_modules(path, out);
  }
}

namespace {

// Keeps the first name of each tensor: a shared module's tensors appear once.
NamedTensors unique_tensors(const NamedTensors& all) {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  for (const auto& entry : all) {
    if (seen.insert(entry.second.impl()).second) out.push_back(entry);
  }
  return out;
}

}  // namespace

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", Held::Parameters, all);
  return unique_tensors(all);
}

NamedTensors Module::named_buffers() const {
  NamedTensors all;
  collect("", Held::Buffers, all);
  return unique_tensors(all);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

NamedModules Module::named_modules() const {
  NamedModules all, unique;
  collect_modules("", all);
  std::set<const Module*> seen;
  for (const auto& entry : all) {
    if (seen.insert(entry.second.get()).second) unique.push_back(entry);
  }
  return unique;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (const Tensor& t : parameters()) total += t.numel();
  return total;
}

// --- profile mode -------------------------------------------------------------------

namespace {

// The module whose forward is running and its dotted path (profile and anomaly mode),
// so that a child can find its own name among its parent's children.
struct RunningModule {
  const Module* module = nullptr;
  std::string path;
};

thread_local RunningModule running;

// The path of `child` below `parent`: its name when it is a direct child,
// else its dotted path among parent's descendants, or "" (a root module, or one
// its caller did not register: its rows then carry the caller's path). The
// deeper search finds the children of a module whose forward takes several
// tensors: such a module is called as module->forward(a, b), never through
// operator(), so it never becomes the running module, and its children run
// while its parent still is.
std::string path_in_parent(const Module* parent, const Module* child) {
  if (parent == nullptr) return "";
  for (const auto& [name, module] : parent->named_children()) {
    if (module.get() == child) return name;
  }
  for (const auto& [path, module] : parent->named_modules()) {
    if (module.get() == child) return path;
  }
  return "";
}

// Makes a module the running one for its lifetime, then restores the caller.
class RunningGuard {
 public:
  RunningGuard(const Module* module, std::string path) : outer_(std::move(running)) {
    running = {module, std::move(path)};
  }
  ~RunningGuard() { running = std::move(outer_); }
  RunningGuard(const RunningGuard&) = delete;
  RunningGuard& operator=(const RunningGuard&) = delete;

 private:
  RunningModule outer_;
};

}  // namespace

Tensor Module::tracked_call(const Tensor& x, const std::function<Tensor()>& run) {
  const std::string name = path_in_parent(running.module, this);
  RunningGuard guard(this, name.empty() ? running.path : join_name(running.path, name));
  std::optional<trace::ModuleScope> traced;
  if (trace::active()) traced.emplace(running.path);
  std::optional<AnomalyModuleScope> anomaly;
  if (anomaly_mode_enabled()) {
    anomaly.emplace(running.path.empty() ? "the root module (" + type_name() + ")"
                                         : running.path + " (" + type_name() + ")");
  }
  // Only leaves are timed: no double counting.
  if (!Profiler::enabled() || !children_.empty()) return run();
  const std::string row = running.path.empty() ? type_name() : running.path + " " + type_name();
  ProfileScope scope(row, ProfilePhase::Forward, x.device());
  return run();
}

// --- mode and placement ---------------------------------------------------------------

Module& Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
  return *this;
}

template <class Convert>
Module& Module::convert_tensors(Convert convert) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : named_parameters()) {
    rebind(t, convert(t.detach()));
    if (t.grad().defined()) t.impl()->grad = convert(t.grad());
  }
  for (const auto& [name, t] : named_buffers()) rebind(t, convert(t.detach()));
  return *this;
}

Module& Module::to(Device device) {
  return convert_tensors([device](const Tensor& t) { return t.to(device); });
}

Module& Module::to(DType dtype) {
  LOOM_CHECK(is_floating(dtype), TypeError,
             "[{}.to] modules convert only to floating dtypes (parameters must stay "
             "differentiable), got {}",
             type_name(), dtype_name(dtype));
  return convert_tensors(
      [dtype](const Tensor& t) { return is_floating(t.dtype()) ? t.to(dtype) : t; });
}

Module& Module::to(MemoryFormat format) {
  LOOM_CHECK(format != MemoryFormat::Preserve, ValueError,
             "[{}.to] takes MemoryFormat::Contiguous or MemoryFormat::ChannelsLast; Preserve "
             "names no layout to convert to",
             type_name());
  return convert_tensors(
      [format](const Tensor& t) { return t.dim() == 4 ? t.contiguous(format) : t; });
}

void Module::zero_grad() {
  for (Tensor& t : parameters()) t.set_grad(Tensor());
}

// --- checkpoints ----------------------------------------------------------------------

StateDict Module::state_dict() const {
  NamedTensors all;
  collect("", Held::Both, all);
  for (auto& [name, t] : all) t = t.detach();
  return all;
}

namespace {

struct StateMismatch {
  std::vector<std::string> missing, unexpected, shapes, dtypes;
};

// Every way `given` disagrees with the module's own state, as PyTorch reports it.
StateMismatch compare_states(const StateDict& own, const StateDict& state,
                             const std::map<std::string, Tensor>& given) {
  StateMismatch m;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      m.missing.push_back(name);
    } else if (it->second.sizes() != t.sizes()) {
      m.shapes.push_back(fmt::format("{}: the state has shape {}, the model {}", name,
                                     shape_str(it->second.sizes()), shape_str(t.sizes())));
    } else if (it->second.dtype() != t.dtype()) {
      m.dtypes.push_back(fmt::format("{}: the state has {}, the model {}", name,
                                     dtype_name(it->second.dtype()), dtype_name(t.dtype())));
    }
  }
  for (const auto& [name, t] : state) {
    if (!own_names.contains(name)) m.unexpected.push_back(name);
  }
  return m;
}

std::map<std::string, Tensor> index_state(const StateDict& state, const std::string& module) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state) {
    LOOM_CHECK(t.defined(), ValueError, "[load_state_dict] {}: \"{}\" is an undefined tensor",
               module, name);
    LOOM_CHECK(by_name.emplace(name, t).second, ValueError,
               "[load_state_dict] {}: the state lists \"{}\" twice", module, name);
  }
  return by_name;
}

void check_state_names(const StateMismatch& m, bool strict, const std::string& module) {
  if (!strict || (m.missing.empty() && m.unexpected.empty())) return;
  std::string problems;
  if (!m.missing.empty()) problems += "\n  missing keys: " + quoted_list(m.missing);
  if (!m.unexpected.empty()) problems += "\n  unexpected keys: " + quoted_list(m.unexpected);
  throw ValueError(fmt::format(
      "[load_state_dict] {}: the state's names do not match the model's:{}\n(names follow "
      "PyTorch's state_dict; pass strict = false to load a partial state)",
      module, problems));
}

void check_state_values(const StateMismatch& m, const std::string& module) {
  auto lines = [](const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& item : items) out += "\n  " + item;
    return out;
  };
  LOOM_CHECK(m.shapes.empty(), ShapeError,
             "[load_state_dict] {}: size mismatch for{}{}\n(was the state saved from a "
             "different model configuration?)",
             module, lines(m.shapes), lines(m.dtypes));
  LOOM_CHECK(m.dtypes.empty(), TypeError,
             "[load_state_dict] {}: dtype mismatch for{}\n(convert the state's tensors, or "
             "the model with to(DType), first)",
             module, lines(m.dtypes));
}

}  // namespace

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict own = state_dict();
  const std::map<std::string, Tensor> given = index_state(state, type_name());
  const StateMismatch mismatch = compare_states(own, state, given);
  check_state_names(mismatch, strict, type_name());
  check_state_values(mismatch, type_name());
  NoGradGuard no_grad;
  for (auto [name, t] : own) {
    auto it = given.find(name);
    if (it != given.end()) t.copy_(it->second);
  }
}

// --- printing -------------------------------------------------------------------------

std::string Module::repr() const {
  const std::string extra = extra_repr();
  if (children_.empty()) return type_name() + "(" + extra + ")";
  std::string body;
  if (!extra.empty()) body += "\n  " + indent_tail(extra, 2);
  for (const auto& [name, child] : children_) {
    body += "\n  (" + name + "): " + indent_tail(child->repr(), 2);
  }
  return type_name() + "(" + body + "\n)";
}

std::string Module::str() const {
  return repr() + "\nTotal parameters: " + with_thousands(num_parameters());
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.str(); }

}  // namespace loom::nn
