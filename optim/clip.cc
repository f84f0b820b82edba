// File: optim/clip.cc
// clip_grad_norm_: sum of squares per device and dtype (fused on the GPU, a
// plain loop on the CPU), then one scaling of every gradient.
#include "optim/clip.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/elementwise.h"
#include "optim/update.h"

namespace loom::optim {

namespace {

double sum_of_squares_cpu(const Tensor& t) {
  const Tensor dense = t.contiguous();
  return visit_float(dense.dtype(), [&]<class T>() {
    const T* x = dense.data_ptr<T>();
    double sum = 0.0;
    for (int64_t i = 0; i < dense.numel(); ++i) sum += double(x[i]) * double(x[i]);
    return sum;
  });
}

bool is_dense(const Tensor& t) { return t.is_contiguous(t.suggest_memory_format()); }

// The gradients by (device, dtype), each run fit for one fused launch.
std::vector<std::vector<Tensor>> runs_of(const std::vector<Tensor>& grads) {
  std::vector<std::vector<Tensor>> runs;
  for (const Tensor& g : grads) {
    auto same = [&](const std::vector<Tensor>& run) {
      return run.front().device() == g.device() && run.front().dtype() == g.dtype();
    };
    auto it = std::ranges::find_if(runs, same);
    if (it == runs.end()) {
      runs.push_back({g});
    } else {
      it->push_back(g);
    }
  }
  return runs;
}

double sum_of_squares(const std::vector<Tensor>& run) {
  if (run.front().device().is_cpu()) {
    double sum = 0.0;
    for (const Tensor& g : run) sum += sum_of_squares_cpu(g);
    return sum;
  }
  std::vector<Tensor> dense;
  for (const Tensor& g : run) dense.push_back(g.contiguous(g.suggest_memory_format()));
  return fused_sum_of_squares(dense);
}

void scale(std::vector<Tensor>& run, double factor) {
  std::vector<Tensor> fusable;
  for (Tensor& g : run) {
    if (g.device().is_cuda() && is_dense(g)) {
      fusable.push_back(g);
    } else {
      mul_(g, factor);
    }
  }
  if (!fusable.empty()) fused_scale(fusable, factor);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  LOOM_CHECK(max_norm >= 0.0, ValueError, "[clip_grad_norm_] max_norm must be >= 0, got {}",
             max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    LOOM_CHECK(params[i].defined(), ValueError, "[clip_grad_norm_] parameter {} is undefined", i);
    const Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    LOOM_CHECK(g.dtype() == DType::Float32 || g.dtype() == DType::Float64, TypeError,
               "[clip_grad_norm_] the gradient of parameter {} (shape {}) has dtype {}; expected "
               "float32 or float64",
               i, shape_str(g.sizes()), dtype_name(g.dtype()));
    grads.push_back(g);
  }
  std::vector<std::vector<Tensor>> runs = runs_of(grads);
  double total = 0.0;
  for (const auto& run : runs) total += sum_of_squares(run);
  const double norm = std::sqrt(total);
  const double factor = max_norm / (norm + 1e-6);
  if (!(factor >= 1.0)) {  // also for a NaN norm, as torch's clamp(max=1) keeps NaN
    for (auto& run : runs) scale(run, factor);
  }
  return norm;
}

}  // namespace loom::optim
