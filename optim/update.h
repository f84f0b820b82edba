// File: optim/update.h
// What the optimizers share below the Optimizer class: the scalars of one
// update (computed once per step in double, as torch.optim does in Python) and
// the fused GPU path. The CPU loops live with each optimizer (sgd.cc, adam.cc, rmsprop.cc, adagrad.cc)
// and are the reference the GPU kernels (core/cuda/optim.cu) must match.
//
// In a build without CUDA no CUDA tensor exists, so the fused functions are
// never reached; they throw DeviceError there.
#pragma once

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/kernel/optim_scalars.h"  // UpdateScalars
#include "optim/optimizer.h"

namespace loom::optim {

// torch.lerp's formula, for the CPU loops: exact at both ends whatever the weight.
template <class T>
T lerp(T from, T to, T weight) {
  const T delta = to - from;
  return std::abs(weight) < T(0.5) ? from + weight * delta : to - delta * (T(1) - weight);
}

// Throws ValueError naming `where` (a state_dict entry) when `value`, a mean
// (Adam's exp_avg_sq, RMSprop's square_avg) or a sum (Adagrad's sum) of squared
// gradients, as `what` says, holds a negative element: no run writes one, and
// its square root divides.
void check_squares_nonnegative(const Tensor& value, const std::string& where, std::string_view what);

// The device slot tables of an optimizer's fused steps, one per launch site
// (group, run), kept across steps so that a table is uploaded only when its
// pointers change. stage() stages a run: its scalars go to device memory now
// and the run waits for launch_staged(), which makes one kernel launch per run
// (its slots all on one GPU and of one dtype) with the gradients of that
// moment; the kind of the scalars says which update. `buffers` names the
// state buffers in the kernel's order (SGD: momentum_buffer; Adam: exp_avg,
// exp_avg_sq, max_exp_avg_sq; RMSprop: square_avg, momentum_buffer, grad_avg;
// Adagrad: sum);
// a name the slot's state lacks passes null.
class FusedTables {
 public:
  FusedTables();
  ~FusedTables();
  FusedTables(const FusedTables&) = delete;
  FusedTables& operator=(const FusedTables&) = delete;

  void stage(size_t group, size_t run, const std::vector<UpdateSlot*>& slots,
             const UpdateScalars& scalars, std::vector<std::string_view> buffers);
  // Launches the runs staged since clear_staged(), in order; `optimizer` names
  // it in errors (a parameter that lost its gradient in between). With
  // `skip_unless_finite` defined (float32, one element, on the runs' GPU) every
  // launch leaves its parameters and state as they are when it is NaN or +-inf.
  void launch_staged(const std::string& optimizer, const Tensor& skip_unless_finite = Tensor());
  void clear_staged();

 private:
  struct Tables;
  std::unique_ptr<Tables> tables_;
};

// For gradient clipping: tensors all dense, on one GPU, of one dtype.
// The sum of their squares, in double (two launches; waits for the result).
double fused_sum_of_squares(const std::vector<Tensor>& tensors);
// Each tensor *= factor, in place (one launch).
void fused_scale(const std::vector<Tensor>& tensors, double factor);

}  // namespace loom::optim
