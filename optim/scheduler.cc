// File: optim/scheduler.cc
// The schedules' closed forms and the shared step / state_dict machinery.
#include "optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>
#include <utility>

#include "core/error.h"

namespace loom::optim {

namespace {

// One learning rate per group from a state_dict entry (`what` names it in errors),
// each a finite number >= 0.
std::vector<double> state_lrs(const Tensor& value, size_t groups, const std::string& op, const char* what) {
  LOOM_CHECK(value.numel() == static_cast<int64_t>(groups), ShapeError,
             "{} {} has shape {} but the optimizer has {} groups", op, what, shape_str(value.sizes()), groups);
  std::vector<double> lrs = value.to_vector<double>();
  for (double lr : lrs) {
    LOOM_CHECK(std::isfinite(lr) && lr >= 0, ValueError, "{} {} holds {}; a learning rate is a finite number >= 0",
               op, what, lr);
  }
  return lrs;
}

}  // namespace

// ---- LRScheduler ---------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : optimizer_(optimizer), name_(std::move(name)), skips_seen_(optimizer.skipped_steps()) {
  for (const ParamGroup& group : optimizer.param_groups()) base_lrs_.push_back(*group.lr);
}

void LRScheduler::apply(int64_t step) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  LOOM_CHECK(groups.size() == base_lrs_.size(), ValueError,
             "[{}] the optimizer has {} parameter groups but the schedule was built for {}",
             name_, groups.size(), base_lrs_.size());
  std::vector<double> lrs(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) lrs[g] = lr_at(step, g);  // may throw: set nothing
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = lrs[g];
}

void LRScheduler::step() {
  if (skips_seen_ < optimizer_.skipped_steps()) {
    ++skips_seen_;
    return;
  }
  apply(step_ + 1);
  ++step_;
}

StateDict LRScheduler::state_dict() const {
  return {{"last_step", tensor({static_cast<double>(step_)}, {}, {.dtype = DType::Int64})},
          {"base_lrs", tensor(base_lrs_, {static_cast<int64_t>(base_lrs_.size())},
                              {.dtype = DType::Float64})}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const std::string op = fmt::format("[{} load_state_dict]", name_);
  std::optional<int64_t> step;
  std::optional<std::vector<double>> base_lrs;
  for (const auto& [name, value] : state) {
    LOOM_CHECK(value.defined() && (name == "last_step" || name == "base_lrs"), ValueError,
               "{} unexpected entry '{}'; expected last_step and base_lrs", op, name);
    if (name == "last_step") {
      step = state_count(value, op + " last_step");
    } else {
      base_lrs = state_lrs(value, base_lrs_.size(), op, "base_lrs");
    }
  }
  LOOM_CHECK(step && base_lrs, ValueError, "{} the state needs both last_step and base_lrs", op);
  const std::vector<double> previous = std::exchange(base_lrs_, *base_lrs);
  try {
    apply(*step);
  } catch (...) {
    base_lrs_ = previous;
    throw;
  }
  step_ = *step;
}

// ---- StepLR, MultiStepLR -----------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  LOOM_CHECK(step_size > 0, ValueError, "[StepLR] step_size must be > 0, got {}", step_size);
  apply(0);
}

double StepLR::lr_at(int64_t step, size_t group) const {
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(step / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  std::ranges::sort(milestones_);
  apply(0);
}

double MultiStepLR::lr_at(int64_t step, size_t group) const {
  const auto passed = std::ranges::upper_bound(milestones_, step) - milestones_.begin();
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(passed));
}

// ---- ExponentialLR, LinearLR, LambdaLR ---------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  LOOM_CHECK(std::isfinite(gamma) && gamma >= 0, ValueError, "[ExponentialLR] gamma must be >= 0, got {}", gamma);
  apply(0);
}

double ExponentialLR::lr_at(int64_t step, size_t group) const {
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(step));
}

LinearLR::LinearLR(Optimizer& optimizer, LinearOptions options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  LOOM_CHECK(options.start_factor > 0 && options.start_factor <= 1 && options.end_factor >= 0 &&
                 options.end_factor <= 1,
             ValueError, "[LinearLR] needs start_factor in (0, 1] and end_factor in [0, 1], got {} and {}",
             options.start_factor, options.end_factor);
  LOOM_CHECK(options.total_steps > 0, ValueError, "[LinearLR] total_steps must be > 0, got {}", options.total_steps);
  apply(0);
}

double LinearLR::lr_at(int64_t step, size_t group) const {
  const double done = static_cast<double>(std::min(step, options_.total_steps)) /
                      static_cast<double>(options_.total_steps);
  return base_lrs()[group] * (options_.start_factor + (options_.end_factor - options_.start_factor) * done);
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer, "LambdaLR"), factor_(std::move(factor)) {
  LOOM_CHECK(factor_ != nullptr, ValueError, "[LambdaLR] the factor function is empty");
  apply(0);
}

double LambdaLR::lr_at(int64_t step, size_t group) const {
  const double factor = factor_(step);
  LOOM_CHECK(std::isfinite(factor) && factor >= 0, ValueError,
             "[LambdaLR] the factor function gave {} at step {}; it must give a finite number >= 0", factor, step);
  return base_lrs()[group] * factor;
}

// ---- CosineAnnealingLR -------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingOptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  LOOM_CHECK(options.warmup_steps >= 0 && options.total_steps > options.warmup_steps, ValueError,
             "[CosineAnnealingLR] needs 0 <= warmup_steps < total_steps, got warmup_steps {} "
             "and total_steps {}",
             options.warmup_steps, options.total_steps);
  LOOM_CHECK(options.min_lr >= 0.0, ValueError, "[CosineAnnealingLR] min_lr must be >= 0, got {}",
             options.min_lr);
  apply(0);
}

double CosineAnnealingLR::lr_at(int64_t step, size_t group) const {
  const double base = base_lrs()[group];
  const auto [total, warmup, min_lr] = options_;
  if (step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return min_lr + (base - min_lr) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0;
}

// ---- OneCycleLR ------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions options)
    : LRScheduler(optimizer, "OneCycleLR"), options_(options) {
  const OneCycleOptions& o = options_;
  LOOM_CHECK(o.total_steps > 0, ValueError, "[OneCycleLR] total_steps must be > 0, got {}",
             o.total_steps);
  LOOM_CHECK(o.pct_start >= 0.0 && o.pct_start <= 1.0, ValueError,
             "[OneCycleLR] pct_start must be in [0, 1], got {}", o.pct_start);
  LOOM_CHECK(o.max_lr > 0.0 && o.div_factor > 0.0 && o.final_div_factor > 0.0, ValueError,
             "[OneCycleLR] max_lr, div_factor and final_div_factor must be > 0, got {}, {}, {}",
             o.max_lr, o.div_factor, o.final_div_factor);
  for (size_t g = 0; o.cycle_momentum && g < optimizer.param_groups().size(); ++g) {
    const ParamGroup& group = optimizer.param_groups()[g];
    LOOM_CHECK(group.betas || group.momentum, ValueError,
               "[OneCycleLR] cycle_momentum needs an optimizer with momentum or betas, but {} "
               "has neither; pass .cycle_momentum = false",
               optimizer.name());
  }
  // torch's phase table: end steps are fractional, as in PyTorch.
  const double initial = o.max_lr / o.div_factor, final = initial / o.final_div_factor;
  const double total = static_cast<double>(o.total_steps), rise = o.pct_start * total;
  const double lo = o.base_momentum, hi = o.max_momentum;
  if (o.three_phase) {
    phases_ = {{rise - 1.0, initial, o.max_lr, hi, lo},
               {2.0 * rise - 2.0, o.max_lr, initial, lo, hi},
               {total - 1.0, initial, final, hi, hi}};
  } else {
    phases_ = {{rise - 1.0, initial, o.max_lr, hi, lo}, {total - 1.0, o.max_lr, final, lo, hi}};
  }
  apply(0);
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == Anneal::Linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t step) const {
  LOOM_CHECK(step <= options_.total_steps, ValueError,
             "[OneCycleLR] step {} is past total_steps {}; build the schedule with the number of "
             "optimizer steps the run takes",
             step, options_.total_steps);
  const auto s = static_cast<double>(step);
  double start = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    if (s <= phases_[i].end_step || i + 1 == phases_.size()) {
      return {&phases_[i], (s - start) / (phases_[i].end_step - start)};
    }
    start = phases_[i].end_step;
  }
  return {&phases_.back(), 1.0};  // not reached: the last phase takes every step
}

double OneCycleLR::lr_at(int64_t step, size_t) const {
  const auto [phase, pct] = locate(step);
  return anneal(phase->start_lr, phase->end_lr, pct);
}

double OneCycleLR::momentum_at(int64_t step) const {
  const auto [phase, pct] = locate(step);
  return anneal(phase->start_momentum, phase->end_momentum, pct);
}

void OneCycleLR::apply(int64_t step) {
  LRScheduler::apply(step);
  if (!options_.cycle_momentum) return;
  const double momentum = momentum_at(step);
  for (ParamGroup& group : optimizer_.param_groups()) {
    if (group.betas) {
      group.betas->first = momentum;
    } else {
      group.momentum = momentum;
    }
  }
}

// ---- ReduceLROnPlateau ------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer),
      options_(options),
      best_(options.mode == PlateauMode::Min ? INFINITY : -INFINITY) {
  LOOM_CHECK(options.factor >= 0 && options.factor < 1, ValueError,
             "[ReduceLROnPlateau] factor must be in [0, 1), got {}", options.factor);
  LOOM_CHECK(options.patience >= 0 && options.cooldown >= 0, ValueError,
             "[ReduceLROnPlateau] patience and cooldown must be >= 0, got {} and {}", options.patience,
             options.cooldown);
  LOOM_CHECK(std::isfinite(options.threshold) && options.threshold >= 0 && options.min_lr >= 0 && options.eps >= 0,
             ValueError, "[ReduceLROnPlateau] threshold, min_lr and eps must be finite numbers >= 0, got {}, {}, {}",
             options.threshold, options.min_lr, options.eps);
}

bool ReduceLROnPlateau::improves(double metric) const {
  const bool relative = options_.threshold_mode == PlateauThreshold::Rel;
  if (options_.mode == PlateauMode::Min) {
    return metric < (relative ? best_ * (1 - options_.threshold) : best_ - options_.threshold);
  }
  return metric > (relative ? best_ * (1 + options_.threshold) : best_ + options_.threshold);
}

void ReduceLROnPlateau::cut_lrs() {
  for (ParamGroup& group : optimizer_.param_groups()) {
    const double cut = std::max(*group.lr * options_.factor, options_.min_lr);
    if (*group.lr - cut > options_.eps) group.lr = cut;
  }
}

// torch's order: the count of bad steps, then the cooldown (which forgets them), then the cut.
void ReduceLROnPlateau::step(double metric) {
  ++step_;
  if (improves(metric)) {  // false for NaN
    best_ = metric;
    bad_steps_ = 0;
  } else {
    ++bad_steps_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_steps_ = 0;
  }
  if (bad_steps_ > options_.patience) {
    cut_lrs();
    cooldown_left_ = options_.cooldown;
    bad_steps_ = 0;
  }
}

StateDict ReduceLROnPlateau::state_dict() const {
  std::vector<double> lrs;
  for (const ParamGroup& group : optimizer_.param_groups()) lrs.push_back(*group.lr);
  const auto count = [](int64_t n) { return tensor({static_cast<double>(n)}, {}, {.dtype = DType::Int64}); };
  return {{"last_step", count(step_)},
          {"bad_steps", count(bad_steps_)},
          {"cooldown_left", count(cooldown_left_)},
          {"best", tensor({best_}, {}, {.dtype = DType::Float64})},
          {"lrs", tensor(lrs, {static_cast<int64_t>(lrs.size())}, {.dtype = DType::Float64})}};
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  const std::string op = "[ReduceLROnPlateau load_state_dict]";
  std::map<std::string, Tensor> entries;
  for (const auto& [name, value] : state) {
    const bool known = name == "last_step" || name == "bad_steps" || name == "cooldown_left" || name == "best" ||
                       name == "lrs";
    LOOM_CHECK(known && value.defined(), ValueError,
               "{} unexpected entry '{}'; expected last_step, bad_steps, cooldown_left, best and lrs", op, name);
    entries[name] = value;
  }
  LOOM_CHECK(entries.size() == 5, ValueError, "{} the state needs last_step, bad_steps, cooldown_left, best and lrs",
             op);
  const int64_t step = state_count(entries["last_step"], op + " last_step");
  const int64_t bad = state_count(entries["bad_steps"], op + " bad_steps");
  const int64_t cooldown = state_count(entries["cooldown_left"], op + " cooldown_left");
  const Tensor& best = entries["best"];
  LOOM_CHECK(best.numel() == 1 && !std::isnan(best.item()), ValueError, "{} best must be one number, got shape {}",
             op, shape_str(best.sizes()));
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  const std::vector<double> lrs = state_lrs(entries["lrs"], groups.size(), op, "lrs");
  for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = lrs[g];
  step_ = step, bad_steps_ = bad, cooldown_left_ = cooldown, best_ = best.item();
}

}  // namespace loom::optim
