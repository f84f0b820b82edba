// File: core/trace.cc
// The per-thread recorder, the op nesting depth and the running module's path.
#include "core/trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/storage.h"

namespace loom::trace {

namespace {

struct State {
  Recorder* recorder = nullptr;
  Substituter* substituter = nullptr;
  int depth = 0;           // public ops running inside one another
  int64_t next_index = 0;  // the next outermost op's ordinal
  int fused_depth = 0;     // FusedRegions open
  std::string module;      // the running module's dotted path
};

thread_local State state;

const char* type_name(const Value& v) {
  constexpr const char* kNames[] = {"an integer", "a number", "a string", "a list of integers",
                                    "a list of numbers"};
  return kNames[v.index()];
}

std::string value_str(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
          return "'" + x + "'";
        } else if constexpr (std::is_arithmetic_v<std::decay_t<decltype(x)>>) {
          return fmt::format("{}", x);
        } else {
          return fmt::format("[{}]", fmt::join(x, ", "));
        }
      },
      v);
}

}  // namespace

bool active() { return state.recorder != nullptr || state.substituter != nullptr; }

Tensor stand_in(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(0, device);
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Recorder::Recorder(Keep keep) : keep_(keep) {
  LOOM_CHECK(state.recorder == nullptr && state.substituter == nullptr, ValueError,
             "[trace] a {} is already active on this thread; traces do not nest",
             state.recorder != nullptr ? "recorder" : "substituter (a traced forward)");
  state.recorder = this;
  state.depth = 0;
  state.next_index = 0;
}

Recorder::~Recorder() { state.recorder = nullptr; }

void Recorder::add(Op op) {
  if (keep_ == Keep::Shapes) {
    for (Tensor& in : op.inputs) in = recorded(in);
    for (Tensor& out : op.outputs) {
      if (!out.defined()) continue;
      Tensor kept = stand_in(out.sizes(), out.strides(), out.dtype(), out.device());
      stand_ins_[out.impl()] = {.made = out.weak_impl(), .stand_in = kept};
      out = kept;
    }
  }
  ops_.push_back(std::move(op));
}

Tensor Recorder::recorded(const Tensor& t) const {
  if (!t.defined()) return t;
  auto found = stand_ins_.find(t.impl());
  // An entry whose tensor died names whatever reuses its address since: not this one.
  if (found == stand_ins_.end() || found->second.made.lock().get() != t.impl()) return t;
  return found->second.stand_in;
}

SubstituteScope::SubstituteScope(Substituter& substituter) {
  LOOM_CHECK(state.recorder == nullptr && state.substituter == nullptr, ValueError,
             "[trace] a {} is already active on this thread; a traced forward cannot run inside another "
             "or inside a trace",
             state.recorder != nullptr ? "recorder" : "substituter");
  state.substituter = &substituter;
  state.depth = 0;
  state.next_index = 0;
}

SubstituteScope::~SubstituteScope() { state.substituter = nullptr; }

void OpScope::enter() {
  entered_ = true;
  outermost_ = state.depth == 0;
  if (outermost_) index_ = state.next_index++;
  ++state.depth;
}

void OpScope::leave() { --state.depth; }

bool OpScope::recorder_attached() { return state.recorder != nullptr; }

bool OpScope::substituting() const {
  return outermost_ && state.substituter != nullptr && state.fused_depth == 0;
}

FusedRegion::FusedRegion() { ++state.fused_depth; }

FusedRegion::~FusedRegion() { --state.fused_depth; }

std::optional<Tensor> OpScope::substitute(const std::vector<Tensor>& inputs,
                                          const std::vector<Attribute>& attributes) {
  if (!substituting()) return std::nullopt;
  return state.substituter->substitute(index_, name_, inputs, attributes);
}

void OpScope::record(std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<Attribute> attributes) {
  if (!outermost_ || state.recorder == nullptr) return;
  for (const Tensor& out : outputs) {
    for (const Tensor& in : inputs) {
      if (in.defined() && out.is_same(in)) return;  // an alias of its input: nothing happened
    }
  }
  state.recorder->add(Op{.name = name_, .inputs = std::move(inputs), .outputs = std::move(outputs),
                         .attributes = std::move(attributes), .module = state.module, .index = index_,
                         .in_fused_block = state.fused_depth > 0});
}

ModuleScope::ModuleScope(std::string path) : outer_(std::move(state.module)) { state.module = std::move(path); }

ModuleScope::~ModuleScope() { state.module = std::move(outer_); }

// --- Op -----------------------------------------------------------------------------

bool Op::has(std::string_view attribute) const {
  for (const Attribute& a : attributes) {
    if (a.name == attribute) return true;
  }
  return false;
}

const Value& Op::value(std::string_view attribute) const {
  for (const Attribute& a : attributes) {
    if (a.name == attribute) return a.value;
  }
  throw ValueError(fmt::format("[trace] op '{}' has no attribute '{}' (it has {})", name, attribute,
                               fmt::join([&] {
                                 std::vector<std::string> names;
                                 for (const Attribute& a : attributes) names.push_back(a.name);
                                 return names;
                               }(), ", ")));
}

namespace {

template <class T>
const T& typed(const Op& op, const Value& v, std::string_view attribute, const char* wanted) {
  const T* p = std::get_if<T>(&v);
  LOOM_CHECK(p != nullptr, ValueError, "[trace] attribute '{}' of op '{}' is {}, not {}", attribute, op.name,
             type_name(v), wanted);
  return *p;
}

}  // namespace

int64_t Op::get_int(std::string_view attribute) const {
  return typed<int64_t>(*this, value(attribute), attribute, "an integer");
}

double Op::get_double(std::string_view attribute) const {
  const Value& v = value(attribute);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return typed<double>(*this, v, attribute, "a number");
}

const std::string& Op::get_string(std::string_view attribute) const {
  return typed<std::string>(*this, value(attribute), attribute, "a string");
}

const std::vector<int64_t>& Op::get_ints(std::string_view attribute) const {
  return typed<std::vector<int64_t>>(*this, value(attribute), attribute, "a list of integers");
}

const std::vector<double>& Op::get_doubles(std::string_view attribute) const {
  return typed<std::vector<double>>(*this, value(attribute), attribute, "a list of numbers");
}

std::string Op::str() const {
  std::string text = name;
  for (const Tensor& t : inputs) text += " " + (t.defined() ? shape_str(t.sizes()) : std::string("-"));
  text += " ->";
  for (const Tensor& t : outputs) text += " " + shape_str(t.sizes());
  for (const Attribute& a : attributes) text += " " + a.name + "=" + value_str(a.value);
  if (!module.empty()) text += " in " + module;
  return text;
}

}  // namespace loom::trace
