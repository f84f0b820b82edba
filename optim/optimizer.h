// File: optim/optimizer.h
// The optimizer base: parameter groups with per-group hyper-parameters,
// per-parameter state tensors, zero_grad, and a state_dict that resumes a run
// bit-identically.
//
//   loom::optim::SGD opt({{.params = backbone, .lr = 0.01}, {.params = head}},
//                        {.lr = 0.1, .momentum = 0.9});  // head uses the defaults
//   opt.zero_grad(); loss.backward(); opt.step();
//
// state_dict() names; i is a parameter's index over all groups in order, g a group's:
//   param_groups.<g>.params    int64 (P): the indices i of the group's P parameters
//   param_groups.<g>.<hyper>   float64 0-d (booleans 0 or 1; betas float64 (2))
//   state.<i>.step             int64 0-d: the updates parameter i has received
//   state.<i>.<buffer>         the parameter's sizes: exp_avg, momentum_buffer, ...
// Parameters never updated have no state.* entries, as in torch.optim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace loom::optim {

// The largest step count a state_dict may hold: 2^53, below which a float64
// (which a state_dict may carry counts in) holds every whole number exactly,
// and far from where a count would overflow as it goes on.
constexpr int64_t kMaxStateCount = int64_t{1} << 53;

// The whole numbers a state_dict entry holds, each from 0 to `max`, read
// exactly whatever the tensor's dtype: integers as they are; floats only when
// finite, whole and in range, since converting 1e30 or 2^63 to int64 is
// undefined behaviour. Throws ValueError naming `what` ("[SGD load_state_dict]
// state.0.step") with the value and the range.
std::vector<int64_t> state_whole_numbers(const Tensor& value, int64_t max, const std::string& what);
// The same for an entry of exactly one count (a step number), 0 to kMaxStateCount.
int64_t state_count(const Tensor& value, const std::string& what);

// Parameters and the hyper-parameters that override the optimizer's defaults
// for them. Unset fields take the defaults: after construction every field the
// optimizer uses is set, so param_groups()[g].lr is group g's learning rate,
// which schedulers rewrite. Setting a field the optimizer does not use (betas
// for SGD) is a ValueError.
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> momentum = std::nullopt;                   // SGD, RMSprop
  std::optional<double> dampening = std::nullopt;                  // SGD
  std::optional<bool> nesterov = std::nullopt;                     // SGD
  std::optional<std::pair<double, double>> betas = std::nullopt;  // Adam, AdamW
  std::optional<double> eps = std::nullopt;                        // Adam, AdamW, RMSprop, Adagrad
  std::optional<double> weight_decay = std::nullopt;
  std::optional<bool> amsgrad = std::nullopt;   // Adam, AdamW
  std::optional<double> alpha = std::nullopt;   // RMSprop
  std::optional<bool> centered = std::nullopt;  // RMSprop
  std::optional<double> lr_decay = std::nullopt;                   // Adagrad
  std::optional<double> initial_accumulator_value = std::nullopt;  // Adagrad
  std::optional<bool> maximize = std::nullopt;
};

// One parameter's optimizer state.
struct ParamState {
  int64_t step = 0;   // updates received
  StateDict buffers;  // by name ("exp_avg", ...), created at the first update
};

// A parameter about to be updated: its gradient has the parameter's strides
// (a copy where autograd produced another layout), so both are walked as flat
// arrays of numel() elements, as are the state buffers.
struct UpdateSlot {
  Tensor param;
  Tensor grad;
  ParamState* state = nullptr;
};

// `grad` laid out as `param` (a copy when it is not), so that both walk as flat
// arrays of numel() elements.
Tensor grad_in_param_layout(const Tensor& param, const Tensor& grad);

class FusedTables;

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Resets every parameter's gradient: to undefined (the default; the next
  // backward allocates it), or to zeros in place.
  void zero_grad(bool set_to_none = true);
  // One update of every parameter that has a gradient, under NoGradGuard, on
  // the parameters' devices. Parameters without a gradient keep their values
  // and their state (step counts included). Same as prepare_step(); apply_step().
  void step();
  // step() in two halves, so that a CUDA graph can capture the device half
  // (optim/train_step.h). prepare_step: the host half: step counts advance, this
  // step's scalars (learning rate, bias corrections) are computed and, for GPU
  // parameters, written to device memory; CPU parameters are updated here.
  // apply_step: launches the GPU updates staged by the last prepare_step(),
  // reading each parameter's gradient as it is then. Parameters must keep their
  // gradients (defined, same sizes) between the two calls. With
  // `skip_unless_finite` (a one-element float32 tensor on the parameters' GPU,
  // the step's loss) the GPU updates change nothing when it is NaN or +-inf,
  // decided on the device (capturable). The host half already ran: step counts
  // and CPU parameters are not rolled back.
  void prepare_step();
  void apply_step(const Tensor& skip_unless_finite = Tensor());
  // Records a step decided against on the host (its loss was NaN or +-inf):
  // instead of step(), so nothing is updated and no step count (Adam's bias
  // correction) advances, and the next step() of an LR schedule over this
  // optimizer leaves the schedule where it is (optim/scheduler.h).
  void skip_step() { ++skipped_steps_; }
  // The steps skip_step() has recorded.
  int64_t skipped_steps() const { return skipped_steps_; }

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Parameter `index`'s state (index over all groups in order); null before its first update.
  const ParamState* state(size_t index) const;
  const std::string& name() const { return name_; }

  // The tensors share memory with the optimizer's state (as in PyTorch): save
  // them, or clone() them to keep a snapshot while training goes on.
  StateDict state_dict() const;
  // Replaces the hyper-parameters and state with `state` (from an optimizer of
  // the same kind over parameters of the same sizes, grouped alike). Buffers
  // are copied to each parameter's device, dtype and layout. Either everything
  // loads or nothing changes: a missing, unknown or misshapen entry throws, and
  // so does a value no run could have written (a step count that is not a
  // whole number from 0 to 2^53, a parameter index that is not a whole number,
  // a hyper-parameter or buffer that is NaN or infinite, a flag not 0 or 1).
  void load_state_dict(const StateDict& state);

 protected:
  // `hypers`: the ParamGroup fields this optimizer uses (by their state_dict
  // names); `buffers`: the state buffers it may create.
  Optimizer(std::string name, std::vector<ParamGroup> groups, std::vector<std::string> hypers,
            std::vector<std::string> buffers);

  // Updates group `group`'s slots (parameters with gradients; never empty).
  // Called by step() under NoGradGuard after each slot's step count went up.
  virtual void update(size_t group, std::vector<UpdateSlot>& slots) = 0;
  // Throws ValueError naming the optimizer and group for a bad hyper-parameter.
  // Called at construction, by load_state_dict and before every step, after
  // the base class has checked that every hyper-parameter is finite.
  virtual void check_group(const ParamGroup& group, size_t index) const = 0;
  // Throws ValueError for a state buffer `name` that load_state_dict is given
  // (`where` names the entry): the base refuses NaN and infinities, which a
  // step would carry into the weights; optimizers add what they know.
  virtual void check_buffer(std::string_view name, const Tensor& value,
                            const std::string& where) const;

  // Checks every group; subclass constructors call it once the defaults are in.
  void check_groups() const;
  // Creates each buffer of `names` that a slot's state lacks, as zeros like its
  // parameter; on a GPU the large ones of one call share a state-pool segment.
  static void create_buffers(std::vector<UpdateSlot>& slots, const std::vector<std::string_view>& names);
  // The buffer `name` of a slot's state, which create_buffers made.
  static Tensor& buffer(UpdateSlot& slot, std::string_view name);
  static bool has_buffer(const UpdateSlot& slot, std::string_view name);
  // Splits slots into runs that one fused kernel can take: one device, one
  // dtype, one `keys[k]` per run; order is kept within a run.
  static std::vector<std::vector<UpdateSlot*>> batches(std::vector<UpdateSlot>& slots,
                                                       const std::vector<int64_t>& keys);
  // The GPU slot tables, kept across steps (see core/cuda/optim.h).
  FusedTables& fused() { return *fused_; }

 private:
  std::vector<UpdateSlot> slots_with_grad(size_t group);
  // Finite hyper-parameters, then check_group.
  void check_group_values(const ParamGroup& group, size_t index) const;
  StateDict group_entries(size_t g, int64_t first_index) const;

  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // [group][param]
  std::vector<std::string> hypers_;
  std::vector<std::string> buffer_names_;
  std::unique_ptr<FusedTables> fused_;
  int64_t skipped_steps_ = 0;
};

}  // namespace loom::optim
