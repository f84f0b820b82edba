// File: optim/scheduler.h
// Learning-rate schedules. A schedule sets every group's lr when it is built
// (the lr of step 0) and again on each step(), which a training loop calls once
// per optimizer step, after it:
//
//   loom::optim::OneCycleLR schedule(opt, {.max_lr = 0.4, .total_steps = epochs * batches});
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); schedule.step(); }
//
// Every lr is a closed form of the step count, so a resumed schedule (built
// anew, then load_state_dict) sets exactly the lrs an uninterrupted one would.
// ReduceLROnPlateau is the exception: it follows a metric, not the step count
// (its step takes the metric), and its state_dict holds what it has seen.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "optim/optimizer.h"

namespace loom::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Moves to the next step and sets every group's lr (and momentum) for it;
  // after a step the optimizer skipped (Optimizer::skip_step), stays where it
  // is instead, so the schedule counts only the updates that happened.
  void step();
  // Steps taken since construction (0 before the first step()).
  int64_t last_step() const { return step_; }
  // Group g's lr when the schedule was built: what the schedule scales.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Group `group`'s lr at step `step` (no side effect).
  virtual double lr_at(int64_t step, size_t group) const = 0;

  // "last_step" (int64 0-d) and "base_lrs" (float64 (G)).
  StateDict state_dict() const;
  // Restores both and sets the groups' lrs for the restored step. ValueError
  // for a last_step that is not a whole number from 0 to 2^53 or a base lr
  // that is not a finite number >= 0 (optim::state_count).
  void load_state_dict(const StateDict& state);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // Writes step `step`'s values into the optimizer's groups. Subclass
  // constructors call apply(0) once their options are set.
  virtual void apply(int64_t step);

  Optimizer& optimizer_;
  std::string name_;

 private:
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
  int64_t skips_seen_;  // the optimizer's skipped steps this schedule has stood still for
};

// lr = base_lr * gamma^floor(step / step_size), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step, size_t group) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(milestones passed: those <= step), as MultiStepLR.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t step, size_t group) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^step, as torch.optim.lr_scheduler.ExponentialLR.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);  // gamma >= 0
  double lr_at(int64_t step, size_t group) const override;

 private:
  double gamma_;
};

struct LinearOptions {
  double start_factor = 1.0 / 3.0;  // in (0, 1]
  double end_factor = 1.0;          // in [0, 1]
  int64_t total_steps = 5;          // > 0; the factor stays at end_factor from then on
};

// lr = base_lr * (start_factor + (end_factor - start_factor) * min(step, total_steps) / total_steps),
// as torch.optim.lr_scheduler.LinearLR (total_iters there): a linear warmup by default.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, LinearOptions options = {});
  double lr_at(int64_t step, size_t group) const override;

 private:
  LinearOptions options_;
};

// lr = base_lr * factor(step), as torch.optim.lr_scheduler.LambdaLR with one
// function for every group; factor must give a finite number >= 0.
//   optim::LambdaLR warmup(opt, [](int64_t step) { return std::min(1.0, (step + 1) / 100.0); });
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);
  double lr_at(int64_t step, size_t group) const override;

 private:
  std::function<double(int64_t)> factor_;
};

struct CosineAnnealingOptions {
  int64_t total_steps = 0;   // the step at which lr reaches min_lr (and stays)
  int64_t warmup_steps = 0;  // < total_steps
  double min_lr = 0.0;
};

// Linear warmup, then a half cosine from base_lr down to min_lr:
//   step < W:       lr = base_lr * (step + 1) / W       (the first update is not wasted at 0)
//   W <= step < T:  lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (step - W) / (T - W))) / 2
//   step >= T:      lr = min_lr
// With W = 0 it is torch's CosineAnnealingLR(T_max = T, eta_min = min_lr) up to T.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingOptions options);
  double lr_at(int64_t step, size_t group) const override;

 private:
  CosineAnnealingOptions options_;
};

enum class Anneal { Cos, Linear };

// torch.optim.lr_scheduler.OneCycleLR's options and defaults (one max_lr for all groups).
struct OneCycleOptions {
  double max_lr = 0.0;
  int64_t total_steps = 0;
  double pct_start = 0.3;  // the fraction of steps spent increasing lr
  Anneal anneal_strategy = Anneal::Cos;
  // Momentum (SGD) or beta1 (Adam) moves opposite to lr:
  // max_momentum -> base_momentum -> max_momentum.
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;         // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;    // final lr = initial lr / final_div_factor
  bool three_phase = false;         // come back down to the initial lr before annealing
};

// lr rises from max_lr / div_factor to max_lr over pct_start of the steps, then
// anneals to the final lr at step total_steps - 1; step() past total_steps throws.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);
  double lr_at(int64_t step, size_t group) const override;
  double momentum_at(int64_t step) const;

 protected:
  void apply(int64_t step) override;

 private:
  struct Phase {
    double end_step;
    double start_lr, end_lr;
    double start_momentum, end_momentum;
  };
  // The phase holding `step` and the fraction of it done.
  std::pair<const Phase*, double> locate(int64_t step) const;
  double anneal(double start, double end, double pct) const;

  OneCycleOptions options_;
  std::vector<Phase> phases_;
};

enum class PlateauMode { Min, Max };        // a lower (loss) or higher (accuracy) metric is better
enum class PlateauThreshold { Rel, Abs };  // better by threshold * best, or by threshold

// torch.optim.lr_scheduler.ReduceLROnPlateau's options and defaults.
struct PlateauOptions {
  PlateauMode mode = PlateauMode::Min;
  double factor = 0.1;     // in [0, 1): new lr = lr * factor
  int64_t patience = 10;   // steps without improvement tolerated before a cut
  double threshold = 1e-4;
  PlateauThreshold threshold_mode = PlateauThreshold::Rel;
  int64_t cooldown = 0;    // steps after a cut during which bad steps are not counted
  double min_lr = 0.0;     // no group's lr goes below it
  double eps = 1e-8;       // a cut smaller than this is skipped
};

// Cuts every group's lr by `factor` once the metric has not improved for more
// than `patience` steps, as torch's ReduceLROnPlateau. Call step(metric) once
// per evaluation (usually per epoch) with the validation loss or accuracy; a
// NaN metric counts as no improvement.
//   optim::ReduceLROnPlateau plateau(opt, {.patience = 3});
//   for (...) { train_epoch(); plateau.step(validation_loss); }
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  void step(double metric);
  int64_t last_step() const { return step_; }
  double best() const { return best_; }                  // +-inf before the first step
  int64_t bad_steps() const { return bad_steps_; }       // since the last improvement or cut
  int64_t cooldown_left() const { return cooldown_left_; }

  // "last_step", "bad_steps", "cooldown_left" (int64 0-d), "best" (float64 0-d)
  // and "lrs" (float64 (G): every group's lr, which the cuts have set).
  StateDict state_dict() const;
  // Restores all five and the groups' lrs; ValueError or ShapeError, naming the
  // entry, for anything missing, unexpected or out of range, with nothing set.
  void load_state_dict(const StateDict& state);

 private:
  bool improves(double metric) const;
  void cut_lrs();

  Optimizer& optimizer_;
  PlateauOptions options_;
  double best_;
  int64_t step_ = 0, bad_steps_ = 0, cooldown_left_ = 0;
};

}  // namespace loom::optim
