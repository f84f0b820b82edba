// File: core/cpu/loss.cc
// Cross-entropy and NLL kernels. Each walks the positions (n, d1...) with the
// target, and reads or writes the C class scores of a position as one Row.
#include "core/cpu/loss.h"

#include <array>
#include <cmath>

#include "core/cpu/loop.h"
#include "core/cpu/softmax.h"

namespace loom::cpu {

namespace {

using Offsets3 = std::array<int64_t, 3>;

// Strides of a (N, C, d1...) operand without its class dim: walked over the
// target's sizes (N, d1...), they give each position's class-0 element.
Shape position_strides(const Strided& scores) {
  Shape strides = scores.strides;
  strides.erase(strides.begin() + 1);
  return strides;
}

// The C class scores of the position at `offset`.
template <class T>
Row<T> class_row(const Strided& scores, int64_t offset) {
  return {scores.ptr<T>() + offset, scores.sizes[1], scores.strides[1]};
}

template <class T>
double row_mean(const Row<T>& row) {
  double total = 0.0;
  for (int64_t c = 0; c < row.length; ++c) total += row[c];
  return total / static_cast<double>(row.length);
}

template <class T>
void zero_row(const Row<T>& row) {
  for (int64_t c = 0; c < row.length; ++c) row[c] = T(0);
}

// One position's cross-entropy against target t: (1 - eps) * -log p[t] +
// eps * mean_c(-log p[c]), with -log p[c] = lse - logit[c]. eps == 0 skips the
// mean so that a masked (-inf) logit does not make the loss 0 * inf = NaN.
template <class T>
double smoothed_nll(const Row<T>& logits, int64_t t, double eps) {
  const double lse = log_sum_exp(logits);
  double loss = (1.0 - eps) * (lse - logits[t]);
  if (eps > 0.0) loss += eps * (lse - row_mean(logits));
  return loss;
}

// Its gradient times g: (softmax(logits) - (1 - eps) * onehot(t) - eps / C) * g.
template <class T>
void smoothed_nll_backward(const Row<T>& dlogits, const Row<T>& logits, int64_t t, double eps,
                           double g) {
  const double lse = log_sum_exp(logits);
  const double off_target = eps / static_cast<double>(logits.length);
  for (int64_t c = 0; c < logits.length; ++c) {
    const double smoothed = off_target + (c == t ? 1.0 - eps : 0.0);
    dlogits[c] = static_cast<T>((std::exp(logits[c] - lse) - smoothed) * g);
  }
}

// Writes loss_at(class row, target) at every position, 0 where the target is
// ignore_index, and totals the others.
template <class T, class LossAt>
kernel::LossTotal position_losses(const Strided& losses, const Strided& scores, const Strided& target,
                          int64_t ignore_index, LossAt&& loss_at) {
  kernel::LossTotal total;
  const Shape score_strides = position_strides(scores);
  const int64_t* classes = target.ptr<int64_t>();
  T* out = losses.ptr<T>();
  auto visit = [&](const Offsets3& o) {  // o: target, scores, losses
    const int64_t t = classes[o[0]];
    if (t == ignore_index) {
      out[o[2]] = T(0);
      return;
    }
    const double loss = loss_at(class_row<T>(scores, o[1]), t);
    out[o[2]] = static_cast<T>(loss);
    total.sum += loss;
    ++total.count;
  };
  for_each_offset<3>(target.sizes, {&target.strides, &score_strides, &losses.strides}, visit);
  return total;
}

}  // namespace

kernel::LossTotal cross_entropy_forward(const Strided& losses, const Strided& logits, const Strided& target,
                                const kernel::CrossEntropyParams& params) {
  return visit_float(logits.dtype, [&]<class T>() {
    return position_losses<T>(
        losses, logits, target, params.ignore_index,
        [&](const Row<T>& row, int64_t t) { return smoothed_nll(row, t, params.label_smoothing); });
  });
}

void cross_entropy_backward(const Strided& dlogits, const Strided& logits, const Strided& target,
                            const Strided& dloss, double scale, const kernel::CrossEntropyParams& params) {
  const Shape logit_strides = position_strides(logits), dlogit_strides = position_strides(dlogits);
  visit_float(logits.dtype, [&]<class T>() {
    const int64_t* classes = target.ptr<int64_t>();
    const T* grads = dloss.ptr<T>();
    auto visit = [&](const std::array<int64_t, 4>& o) {  // o: target, logits, dloss, dlogits
      const Row<T> din = class_row<T>(dlogits, o[3]);
      const int64_t t = classes[o[0]];
      if (t == params.ignore_index) {
        zero_row(din);
        return;
      }
      smoothed_nll_backward(din, class_row<T>(logits, o[1]), t, params.label_smoothing,
                            grads[o[2]] * scale);
    };
    for_each_offset<4>(target.sizes,
                       {&target.strides, &logit_strides, &dloss.strides, &dlogit_strides}, visit);
  });
}

kernel::LossTotal nll_loss_forward(const Strided& losses, const Strided& log_probs, const Strided& target,
                           int64_t ignore_index) {
  return visit_float(log_probs.dtype, [&]<class T>() {
    return position_losses<T>(losses, log_probs, target, ignore_index,
                              [](const Row<T>& row, int64_t t) { return -double{row[t]}; });
  });
}

void nll_loss_backward(const Strided& dlog_probs, const Strided& target, const Strided& dloss,
                       double scale, int64_t ignore_index) {
  const Shape dscore_strides = position_strides(dlog_probs);
  visit_float(dlog_probs.dtype, [&]<class T>() {
    const int64_t* classes = target.ptr<int64_t>();
    const T* grads = dloss.ptr<T>();
    auto visit = [&](const Offsets3& o) {  // o: target, dloss, dlog_probs
      const Row<T> din = class_row<T>(dlog_probs, o[2]);
      zero_row(din);
      const int64_t t = classes[o[0]];
      if (t != ignore_index) din[t] = static_cast<T>(-grads[o[1]] * scale);
    };
    for_each_offset<3>(target.sizes, {&target.strides, &dloss.strides, &dscore_strides}, visit);
  });
}

}  // namespace loom::cpu
