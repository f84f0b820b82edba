// File: optim/optimizer.cc
// Parameter groups, per-parameter state, zero_grad, the step skeleton and the
// state_dict round trip shared by every optimizer.
#include "optim/optimizer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <type_traits>

#include "core/autograd.h"
#include "core/error.h"
#include "core/step_boundary.h"
#include "optim/update.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator_purpose.h"
#endif

namespace loom::optim {

namespace {

// Dense in the layout empty_like() gives, so that a flat walk over raw_data()
// visits each element once.
bool is_dense(const Tensor& t) { return t.is_contiguous(t.suggest_memory_format()); }

// The state buffers live as long as the optimizer: on a GPU they come from the
// allocator's state pool, apart from the holes of the first step's activations.
struct StateMemory {
#ifdef LOOM_WITH_CUDA
  cuda::PurposeScope purpose{cuda::Purpose::State};
#endif
};

// Readies each device's state pool among `likes` for one buffer like each of
// them, so that the large ones share a segment (core/cuda/allocator_purpose.h).
void reserve_state_like(const std::vector<Tensor>& likes) {
#ifdef LOOM_WITH_CUDA
  std::map<int, std::vector<size_t>> sizes;
  for (const Tensor& like : likes) {
    if (like.device().is_cuda()) {
      sizes[like.device().index].push_back(static_cast<size_t>(like.numel()) * element_size(like.dtype()));
    }
  }
  for (const auto& [device, device_sizes] : sizes) cuda::reserve_state(device, device_sizes);
#else
  (void)likes;
#endif
}

std::string location(size_t group, size_t index) {
  return fmt::format("parameter {} (group {})", index, group);
}

void check_param(const Tensor& p, const std::string& name, const std::string& where) {
  LOOM_CHECK(p.defined(), ValueError, "[{}] {} is an undefined tensor", name, where);
  LOOM_CHECK(p.dtype() == DType::Float32 || p.dtype() == DType::Float64, TypeError,
             "[{}] {} (shape {}) has dtype {}; optimizers update float32 or float64 tensors",
             name, where, shape_str(p.sizes()), dtype_name(p.dtype()));
  LOOM_CHECK(p.is_leaf(), ValueError,
             "[{}] {} (shape {}) is not a leaf tensor, so its .grad is never filled; optimize "
             "the tensors you created (e.g. net.parameters())",
             name, where, shape_str(p.sizes()));
  LOOM_CHECK(is_dense(p), ValueError,
             "[{}] {} (shape {}, strides {}) is not dense; optimizers update parameters as flat "
             "arrays: pass a contiguous (or channels-last) tensor",
             name, where, shape_str(p.sizes()), shape_str(p.strides()));
}

// ---- hyper-parameters as state_dict values ----------------------------------------

// Calls fn(name, field) for every hyper-parameter field of a group.
template <class Group, class Fn>
void for_each_hyper(Group& group, Fn&& fn) {
  fn("lr", group.lr);
  fn("momentum", group.momentum);
  fn("dampening", group.dampening);
  fn("nesterov", group.nesterov);
  fn("betas", group.betas);
  fn("eps", group.eps);
  fn("weight_decay", group.weight_decay);
  fn("amsgrad", group.amsgrad);
  fn("alpha", group.alpha);
  fn("centered", group.centered);
  fn("lr_decay", group.lr_decay);
  fn("initial_accumulator_value", group.initial_accumulator_value);
  fn("maximize", group.maximize);
}

std::vector<double> values_of(double v) { return {v}; }
std::vector<double> values_of(bool v) { return {v ? 1.0 : 0.0}; }
std::vector<double> values_of(const std::pair<double, double>& v) { return {v.first, v.second}; }

void assign(std::optional<double>& field, const std::vector<double>& v) { field = v[0]; }
void assign(std::optional<bool>& field, const std::vector<double>& v) { field = v[0] != 0.0; }
void assign(std::optional<std::pair<double, double>>& field, const std::vector<double>& v) {
  field = std::pair{v[0], v[1]};
}

Tensor float64_tensor(const std::vector<double>& v) {
  return tensor(v, v.size() == 1 ? Shape{} : Shape{static_cast<int64_t>(v.size())},
                {.dtype = DType::Float64});
}

Tensor int64_tensor(const std::vector<double>& v, bool scalar) {
  return tensor(v, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())},
                {.dtype = DType::Int64});
}

// ---- parsing state_dict names ---------------------------------------------------------

// "state.12.exp_avg" -> {"state", "12", "exp_avg"}; nullopt unless three parts.
std::optional<std::array<std::string_view, 3>> split_name(std::string_view name) {
  const size_t first = name.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = name.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  return std::array{name.substr(0, first), name.substr(first + 1, second - first - 1),
                    name.substr(second + 1)};
}

std::optional<size_t> parse_index(std::string_view text) {
  size_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

// ---- whole numbers from a state_dict ------------------------------------------------------

std::vector<int64_t> state_whole_numbers(const Tensor& value, int64_t max, const std::string& what) {
  const bool integral = value.dtype() == DType::Int64 || value.dtype() == DType::Int32 ||
                        value.dtype() == DType::UInt8 || value.dtype() == DType::Bool;
  std::vector<int64_t> numbers;
  if (integral) {
    numbers = value.to_vector<int64_t>();
    for (int64_t n : numbers) {
      LOOM_CHECK(n >= 0 && n <= max, ValueError,
                 "{} holds {}; expected a whole number from 0 to {} (the state is corrupt, or "
                 "was not written for this optimizer)",
                 what, n, max);
    }
    return numbers;
  }
  for (double v : value.to_vector<double>()) {
    // Checked before the conversion, which is undefined behaviour out of range.
    LOOM_CHECK(std::isfinite(v) && v == std::trunc(v) && v >= 0 && v <= static_cast<double>(max),
               ValueError,
               "{} holds {}; expected a whole number from 0 to {} (the state is corrupt, or was "
               "not written for this optimizer)",
               what, v, max);
    numbers.push_back(static_cast<int64_t>(v));
  }
  return numbers;
}

int64_t state_count(const Tensor& value, const std::string& what) {
  LOOM_CHECK(value.numel() == 1, ValueError, "{} must be one count, got shape {} ({} values)",
             what, shape_str(value.sizes()), value.numel());
  return state_whole_numbers(value, kMaxStateCount, what)[0];
}

// ---- construction, zero_grad, step -------------------------------------------------------

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups,
                     std::vector<std::string> hypers, std::vector<std::string> buffers)
    : name_(std::move(name)),
      groups_(std::move(groups)),
      hypers_(std::move(hypers)),
      buffer_names_(std::move(buffers)),
      fused_(std::make_unique<FusedTables>()) {
  size_t total = 0;
  std::map<const TensorImpl*, size_t> seen;  // parameter -> its index
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const Tensor& p : groups_[g].params) {
      const std::string where = location(g, total);
      check_param(p, name_, where);
      auto [it, fresh] = seen.emplace(p.impl(), total);
      LOOM_CHECK(fresh, ValueError,
                 "[{}] {} is the same tensor as parameter {}; each tensor may appear once in "
                 "one group",
                 name_, where, it->second);
      ++total;
    }
    for_each_hyper(groups_[g], [&](const char* hyper, const auto& field) {
      LOOM_CHECK(!field || std::ranges::find(hypers_, hyper) != hypers_.end(), ValueError,
                 "[{}] group {} sets {}, which {} does not use (its hyper-parameters: {})", name_,
                 g, hyper, name_, fmt::join(hypers_, ", "));
    });
    state_.emplace_back(groups_[g].params.size());
  }
  LOOM_CHECK(total > 0, ValueError,
             "[{}] got an empty parameter list; pass the tensors to optimize, e.g. "
             "net.parameters()",
             name_);
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (p.grad().defined()) {
        Tensor grad = p.grad();
        grad.zero_();
      }
    }
  }
}

void Optimizer::step() {
  prepare_step();
  apply_step();
  // The end of a step is a step boundary: plans that background builds finished
  // (lazy plan building) swap in here for loops that do not use TrainStep.
  const bool on_gpu = std::any_of(groups_.begin(), groups_.end(), [](const ParamGroup& group) {
    return std::any_of(group.params.begin(), group.params.end(),
                       [](const Tensor& p) { return p.defined() && p.device().is_cuda(); });
  });
  if (on_gpu) step_boundary();
}

void Optimizer::prepare_step() {
  NoGradGuard no_grad;
  fused_->clear_staged();
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_group_values(groups_[g], g);
    std::vector<UpdateSlot> slots = slots_with_grad(g);
    if (!slots.empty()) update(g, slots);
  }
}

void Optimizer::apply_step(const Tensor& skip_unless_finite) {
  NoGradGuard no_grad;
  LOOM_CHECK(!skip_unless_finite.defined() ||
                 (skip_unless_finite.numel() == 1 && skip_unless_finite.dtype() == DType::Float32 &&
                  skip_unless_finite.device().is_cuda()),
             ValueError,
             "[{}] apply_step's skip_unless_finite must be one float32 on the GPU, got {} {} on {}",
             name_, shape_str(skip_unless_finite.sizes()), dtype_name(skip_unless_finite.dtype()),
             skip_unless_finite.device().str());
  fused_->launch_staged(name_, skip_unless_finite);
}

Tensor grad_in_param_layout(const Tensor& param, const Tensor& grad) {
  const bool walks_alike = grad.sizes() == param.sizes() &&
                           grad.is_contiguous(param.suggest_memory_format());
  return walks_alike ? grad : empty_like(param).copy_(grad);
}

std::vector<UpdateSlot> Optimizer::slots_with_grad(size_t g) {
  size_t index = 0;  // over all groups, as in messages and state_dict names
  for (size_t before = 0; before < g; ++before) index += groups_[before].params.size();
  std::vector<UpdateSlot> slots;
  for (size_t j = 0; j < groups_[g].params.size(); ++j, ++index) {
    Tensor& p = groups_[g].params[j];
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    LOOM_CHECK(grad.sizes() == p.sizes() && grad.dtype() == p.dtype() &&
                   grad.device() == p.device(),
               ValueError, "[{}] the gradient {} {} on {} of {} ({} {} on {}) does not match it",
               name_, shape_str(grad.sizes()), dtype_name(grad.dtype()), grad.device().str(),
               location(g, index), shape_str(p.sizes()), dtype_name(p.dtype()), p.device().str());
    // The GPU path reads the gradient again at launch (apply_step) and lays it
    // out there; copying it here too would allocate outside a captured step.
    if (!p.device().is_cuda()) grad = grad_in_param_layout(p, grad);
    check_inplace(p, name_);  // bumps the version: saved copies of p are now stale
    ParamState& state = state_[g][j];
    ++state.step;
    slots.push_back({p, grad, &state});
  }
  return slots;
}

void Optimizer::check_groups() const {
  for (size_t g = 0; g < groups_.size(); ++g) check_group_values(groups_[g], g);
}

void Optimizer::check_group_values(const ParamGroup& group, size_t index) const {
  // The subclasses' range checks let infinities through (inf >= 0).
  for_each_hyper(group, [&](const char* hyper, const auto& field) {
    if (!field) return;
    const std::vector<double> values = values_of(*field);
    LOOM_CHECK(std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); }),
               ValueError, "[{}] group {}: {} must be finite, got {}", name_, index, hyper,
               fmt::join(values, ", "));
  });
  check_group(group, index);
}

void Optimizer::check_buffer(std::string_view name, const Tensor& value,
                             const std::string& where) const {
  const std::vector<double> values = value.to_vector<double>();
  const auto bad = std::find_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); });
  LOOM_CHECK(bad == values.end(), ValueError,
             "{} holds {} at element {}; an optimizer's {} must be finite (the state is corrupt, or "
             "comes from a run that diverged)",
             where, *bad, bad - values.begin(), name);
}

const ParamState* Optimizer::state(size_t index) const {
  for (const auto& group_state : state_) {
    if (index < group_state.size()) {
      const ParamState& s = group_state[index];
      return s.step > 0 || !s.buffers.empty() ? &s : nullptr;
    }
    index -= group_state.size();
  }
  return nullptr;
}

// ---- helpers for subclasses ---------------------------------------------------------------

void Optimizer::create_buffers(std::vector<UpdateSlot>& slots, const std::vector<std::string_view>& names) {
  std::vector<std::pair<UpdateSlot*, std::string_view>> missing;
  std::vector<Tensor> likes;
  for (UpdateSlot& slot : slots) {
    for (std::string_view name : names) {
      if (has_buffer(slot, name)) continue;
      missing.emplace_back(&slot, name);
      likes.push_back(slot.param);
    }
  }
  if (missing.empty()) return;
  [[maybe_unused]] const StateMemory memory;
  reserve_state_like(likes);
  for (auto [slot, name] : missing) slot->state->buffers.emplace_back(std::string(name), zeros_like(slot->param));
}

Tensor& Optimizer::buffer(UpdateSlot& slot, std::string_view name) {
  for (auto& [key, tensor] : slot.state->buffers) {
    if (key == name) return tensor;
  }
  throw Error(fmt::format("[optimizer] internal: no buffer '{}' for a parameter of shape {}; create_buffers "
                          "makes it before the update",
                          name, shape_str(slot.param.sizes())));
}

bool Optimizer::has_buffer(const UpdateSlot& slot, std::string_view name) {
  return std::ranges::any_of(slot.state->buffers,
                             [&](const auto& entry) { return entry.first == name; });
}

std::vector<std::vector<UpdateSlot*>> Optimizer::batches(std::vector<UpdateSlot>& slots,
                                                         const std::vector<int64_t>& keys) {
  std::vector<std::vector<UpdateSlot*>> runs;
  std::vector<size_t> run_of;  // the first slot of each run, which names its key
  for (size_t k = 0; k < slots.size(); ++k) {
    auto same_run = [&](size_t first) {
      const Tensor& a = slots[first].param;
      const Tensor& b = slots[k].param;
      return keys[first] == keys[k] && a.device() == b.device() && a.dtype() == b.dtype();
    };
    auto it = std::ranges::find_if(run_of, same_run);
    if (it == run_of.end()) {
      run_of.push_back(k);
      runs.emplace_back();
      it = run_of.end() - 1;
    }
    runs[it - run_of.begin()].push_back(&slots[k]);
  }
  return runs;
}

// ---- state_dict -------------------------------------------------------------------------

StateDict Optimizer::group_entries(size_t g, int64_t first_index) const {
  const std::string prefix = fmt::format("param_groups.{}.", g);
  std::vector<double> indices(groups_[g].params.size());
  for (size_t j = 0; j < indices.size(); ++j) indices[j] = static_cast<double>(first_index + j);
  StateDict out{{prefix + "params", int64_tensor(indices, false)}};
  for_each_hyper(groups_[g], [&](const char* hyper, const auto& field) {
    if (field) out.emplace_back(prefix + hyper, float64_tensor(values_of(*field)));
  });
  return out;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  for (const auto& group_state : state_) {
    for (const ParamState& s : group_state) {
      if (s.step > 0 || !s.buffers.empty()) {
        const std::string prefix = fmt::format("state.{}.", index);
        out.emplace_back(prefix + "step", int64_tensor({static_cast<double>(s.step)}, true));
        for (const auto& [name, tensor] : s.buffers) out.emplace_back(prefix + name, tensor);
      }
      ++index;
    }
  }
  index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (auto& entry : group_entries(g, index)) out.push_back(std::move(entry));
    index += static_cast<int64_t>(groups_[g].params.size());
  }
  return out;
}

// ---- load_state_dict: parse into a copy, check it is complete, then commit ------------------

namespace {

struct LoadTarget {
  std::string op;  // "[SGD load_state_dict]"
  const std::vector<std::string>& buffer_names;
  std::vector<ParamGroup> groups;
  std::vector<std::vector<ParamState>> state;
  std::vector<std::pair<size_t, size_t>> where;  // parameter index -> (group, position)
  std::vector<std::set<std::string>> group_fields_seen;
  std::vector<bool> step_seen;  // by parameter index
  std::function<void(std::string_view, const Tensor&, const std::string&)> check_buffer;
};

void load_params_entry(LoadTarget& target, size_t g, const Tensor& value) {
  std::vector<int64_t> expected;
  for (size_t i = 0; i < target.where.size(); ++i) {
    if (target.where[i].first == g) expected.push_back(static_cast<int64_t>(i));
  }
  const std::vector<int64_t> given = state_whole_numbers(
      value, kMaxStateCount, fmt::format("{} param_groups.{}.params", target.op, g));
  LOOM_CHECK(given == expected, ValueError,
             "{} group {} holds parameters [{}] in the state but [{}] here; build the optimizer "
             "over the same parameters, grouped alike",
             target.op, g, fmt::join(given, ", "), fmt::join(expected, ", "));
}

void load_group_entry(LoadTarget& target, size_t g, std::string_view field, const Tensor& value) {
  LOOM_CHECK(g < target.groups.size(), ValueError,
             "{} the state has parameter group {} but this optimizer has {} group(s)", target.op, g,
             target.groups.size());
  target.group_fields_seen[g].emplace(field);
  if (field == "params") return load_params_entry(target, g, value);
  bool known = false;
  for_each_hyper(target.groups[g], [&](const char* hyper, auto& current) {
    if (field != hyper || !current) return;
    known = true;
    const size_t count = values_of(*current).size();
    LOOM_CHECK(value.numel() == static_cast<int64_t>(count), ShapeError,
               "{} param_groups.{}.{} has shape {} but holds {} value(s)", target.op, g, field,
               shape_str(value.sizes()), count);
    const std::vector<double> values = value.to_vector<double>();
    if constexpr (std::is_same_v<std::decay_t<decltype(*current)>, bool>) {
      LOOM_CHECK(values[0] == 0.0 || values[0] == 1.0, ValueError,
                 "{} param_groups.{}.{} is {}; a flag is 0 or 1", target.op, g, field, values[0]);
    }
    assign(current, values);
  });
  LOOM_CHECK(known, ValueError,
             "{} param_groups.{}.{} is not a hyper-parameter of this optimizer; was the state "
             "saved by another kind of optimizer?",
             target.op, g, field);
}

void load_state_entry(LoadTarget& target, size_t i, std::string_view field, const Tensor& value) {
  LOOM_CHECK(i < target.where.size(), ValueError,
             "{} the state has parameter {} but this optimizer has {} parameters", target.op, i,
             target.where.size());
  const auto [g, j] = target.where[i];
  const Tensor& p = target.groups[g].params[j];
  ParamState& s = target.state[g][j];
  if (field == "step") {
    s.step = state_count(value, fmt::format("{} state.{}.step", target.op, i));
    target.step_seen[i] = true;
    return;
  }
  LOOM_CHECK(std::ranges::find(target.buffer_names, field) != target.buffer_names.end(),
             ValueError, "{} state.{}.{} is not a buffer of this optimizer (its buffers: {})",
             target.op, i, field, fmt::join(target.buffer_names, ", "));
  LOOM_CHECK(value.sizes() == p.sizes(), ShapeError,
             "{} state.{}.{} has shape {} but parameter {} has shape {}", target.op, i, field,
             shape_str(value.sizes()), i, shape_str(p.sizes()));
  target.check_buffer(field, value, fmt::format("{} state.{}.{}", target.op, i, field));
  [[maybe_unused]] const StateMemory memory;
  s.buffers.emplace_back(std::string(field), empty_like(p).copy_(value));
}

// A state_dict entry, its name split: state.<index>.<field> or param_groups.<index>.<field>.
struct LoadEntry {
  bool is_state = false;
  size_t index = 0;
  std::string_view field;
  const Tensor* value = nullptr;
};

// Every entry of `state`, checked for a unique, well-formed name and a defined tensor.
std::vector<LoadEntry> split_entries(const StateDict& state, const std::string& op) {
  std::vector<LoadEntry> entries;
  std::set<std::string_view> names;
  for (const auto& [name, value] : state) {
    LOOM_CHECK(names.insert(name).second, ValueError, "{} '{}' appears twice", op, name);
    const auto parts = split_name(name);
    const auto index = parts ? parse_index((*parts)[1]) : std::nullopt;
    const bool known = index && ((*parts)[0] == "state" || (*parts)[0] == "param_groups");
    LOOM_CHECK(known && value.defined(), ValueError,
               "{} unexpected entry '{}'; expected state.<i>.<name> or param_groups.<g>.<name> "
               "with a defined tensor",
               op, name);
    entries.push_back({(*parts)[0] == "state", *index, (*parts)[2], &value});
  }
  return entries;
}

// The parameters whose buffers `entries` hold, one per entry that names one
// (load_state_entry checks every entry).
std::vector<Tensor> loaded_buffer_params(const LoadTarget& target, const std::vector<LoadEntry>& entries) {
  std::vector<Tensor> likes;
  for (const LoadEntry& e : entries) {
    if (!e.is_state || e.index >= target.where.size()) continue;
    if (std::ranges::find(target.buffer_names, e.field) == target.buffer_names.end()) continue;
    const auto [g, j] = target.where[e.index];
    likes.push_back(target.groups[g].params[j]);
  }
  return likes;
}

void check_complete(const LoadTarget& target, const std::vector<std::string>& hypers) {
  for (size_t g = 0; g < target.groups.size(); ++g) {
    for (const std::string& field : hypers) {
      LOOM_CHECK(target.group_fields_seen[g].contains(field), ValueError,
                 "{} the state lacks param_groups.{}.{}", target.op, g, field);
    }
    LOOM_CHECK(target.group_fields_seen[g].contains("params"), ValueError,
               "{} the state lacks param_groups.{}.params", target.op, g);
  }
  for (size_t i = 0; i < target.where.size(); ++i) {
    const auto [g, j] = target.where[i];
    LOOM_CHECK(target.step_seen[i] || target.state[g][j].buffers.empty(), ValueError,
               "{} the state has buffers for parameter {} but no state.{}.step", target.op, i, i);
  }
}

}  // namespace

void Optimizer::load_state_dict(const StateDict& state) {
  LoadTarget target{.op = fmt::format("[{} load_state_dict]", name_),
                    .buffer_names = buffer_names_,
                    .groups = groups_,
                    .state = {},
                    .where = {},
                    .group_fields_seen = std::vector<std::set<std::string>>(groups_.size()),
                    .step_seen = {},
                    .check_buffer = [this](std::string_view name, const Tensor& value,
                                           const std::string& where) {
                      check_buffer(name, value, where);
                    }};
  for (size_t g = 0; g < groups_.size(); ++g) {
    target.state.emplace_back(groups_[g].params.size());
    for (size_t j = 0; j < groups_[g].params.size(); ++j) target.where.emplace_back(g, j);
  }
  target.step_seen.assign(target.where.size(), false);
  const std::vector<LoadEntry> entries = split_entries(state, target.op);
  reserve_state_like(loaded_buffer_params(target, entries));
  for (const LoadEntry& e : entries) {
    if (e.is_state) {
      load_state_entry(target, e.index, e.field, *e.value);
    } else {
      load_group_entry(target, e.index, e.field, *e.value);
    }
  }
  check_complete(target, hypers_);
  for (size_t g = 0; g < target.groups.size(); ++g) check_group_values(target.groups[g], g);
  groups_ = std::move(target.groups);
  state_ = std::move(target.state);
}

}  // namespace loom::optim
