// File: core/trace.cc
// The per-thread recorder, the op nesting depth and the running module's path.
#include "core/trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace loom::trace {

namespace {

struct State {
  Recorder* recorder = nullptr;
  int depth = 0;           // public ops running inside one another
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

bool active() { return state.recorder != nullptr; }

Recorder::Recorder() {
  LOOM_CHECK(state.recorder == nullptr, ValueError,
             "[trace] a recorder is already recording on this thread; traces do not nest");
  state.recorder = this;
  state.depth = 0;
}

Recorder::~Recorder() { state.recorder = nullptr; }

void OpScope::enter() {
  entered_ = true;
  outermost_ = state.depth == 0;
  ++state.depth;
}

void OpScope::leave() { --state.depth; }

void OpScope::record(std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<Attribute> attributes) {
  if (!outermost_ || state.recorder == nullptr) return;
  for (const Tensor& out : outputs) {
    for (const Tensor& in : inputs) {
      if (in.defined() && out.is_same(in)) return;  // an alias of its input: nothing happened
    }
  }
  state.recorder->add(Op{.name = name_, .inputs = std::move(inputs), .outputs = std::move(outputs),
                         .attributes = std::move(attributes), .module = state.module});
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
