// File: core/cuda/loss.cu
// Fused cross-entropy and NLL kernels. A group of L lanes owns one position at a
// time: several lanes when the classes are contiguous (they read one row
// together, coalesced), one thread otherwise (then neighbouring threads read
// neighbouring positions, as in NCHW). The forward also totals its losses per
// block; a one-block kernel adds the block totals in a fixed order and writes
// the reduced loss (a small batch's forward runs as one block and writes them
// itself). The backward reads its mean's count from device memory, so
// nothing waits for the host.
//
// N batch, C classes, d1... optional spatial dims; P positions (n, d1...).
#include <math.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda/element.cuh"
#include "core/cuda/geometry.cuh"
#include "core/cuda/loss_kernels.h"

namespace loom::cuda {

namespace {

constexpr int kWarpSize = 32;

enum class LossKind { CrossEntropy, Nll };

// Each operand's geometry over the positions (N, d1...), row-major: an
// (N, C, d1...) operand is seen without its class dim, at its class-0 element.
enum Operand { kTarget, kScores, kOut, kDloss, kOperands };

// T: the losses' dtype, which the kernels compute in; S: the scores' storage,
// T itself or a 16-bit format (autocast's logits), read and written through
// to_compute / from_compute, so that the results are those of converting the
// scores to T first and the gradient back after, bit for bit.
template <class T, class S>
struct LossArgs {
  const int64_t* target;  // (N, d1...)
  const S* scores;        // logits or log_probs (N, C, d1...); null for NLL backward
  T* out;                 // forward: losses (N, d1...)
  S* dscores;             // backward: (N, C, d1...)
  const T* dloss;         // backward: one value per position
  Geometry at[kOperands];
  int64_t positions;   // P
  int64_t classes;     // C
  int64_t score_step;  // class stride of scores
  int64_t out_step;    // class stride of dscores
  int64_t ignore_index;
  double eps;            // label smoothing
  LossScale scale;       // backward: what multiplies dloss
  LossScratch* scratch;  // forward: block totals
  LossTotals* totals;    // forward: the totals and the bad-target flag
};

__device__ float exp_of(float x) { return expf(x); }
__device__ double exp_of(double x) { return exp(x); }
__device__ float log_of(float x) { return logf(x); }
__device__ double log_of(double x) { return log(x); }

// Running log-sum-exp: the largest value seen and the sum of exp(x - max).
// NaN wins, as in cpu::row_max; a -inf value adds nothing, so a row with masked
// logits works, and an empty state (max -inf, sum 0) merges as a no-op.
template <class T>
struct Lse {
  T max = -INFINITY;
  T sum = 0;

  __device__ void merge(T other_max, T other_sum) {
    if (isnan(other_max)) {
      max = other_max;
    } else if (other_max > max) {
      sum = sum * exp_of(max - other_max) + other_sum;
      max = other_max;
    } else if (other_max > -INFINITY) {
      sum += other_sum * exp_of(other_max - max);
    }
  }
  __device__ T value() const { return max + log_of(sum); }
};

// The lanes of this thread's group, for shuffles that stay inside it.
template <int L>
__device__ unsigned group_mask() {
  if constexpr (L == kWarpSize) {
    return 0xffffffffu;
  } else {
    return ((1u << L) - 1u) << (threadIdx.x % kWarpSize / L * L);
  }
}

// Both reductions below are butterflies of commutative steps, so every lane of
// the group ends with the same bits.
template <int L, class T>
__device__ T group_sum(T value) {
  for (int offset = L / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(group_mask<L>(), value, offset, L);
  }
  return value;
}

// A stored score as T.
template <class T, class S>
__device__ T score_of(const S* p) {
  return static_cast<T>(to_compute(*p));
}

// log(sum(exp(row))) over the C classes `step` apart, shifted by the max.
template <int L, class T, class S>
__device__ T row_log_sum_exp(const S* row, int64_t classes, int64_t step, int lane) {
  Lse<T> state;
  for (int64_t c = lane; c < classes; c += L) state.merge(score_of<T>(row + c * step), T(1));
  for (int offset = L / 2; offset > 0; offset /= 2) {
    const T other_max = __shfl_xor_sync(group_mask<L>(), state.max, offset, L);
    const T other_sum = __shfl_xor_sync(group_mask<L>(), state.sum, offset, L);
    state.merge(other_max, other_sum);
  }
  return state.value();
}

template <int L, class T, class S>
__device__ T row_sum(const S* row, int64_t classes, int64_t step, int lane) {
  T total = 0;
  for (int64_t c = lane; c < classes; c += L) total += score_of<T>(row + c * step);
  return group_sum<L>(total);
}

// Writes `value` to every class of one position.
template <int L, class S>
__device__ void fill_row(S* row, int64_t classes, int64_t step, compute_t<S> value, int lane) {
  for (int64_t c = lane; c < classes; c += L) row[c * step] = from_compute<S>(value);
}

__device__ bool is_class(int64_t t, int64_t classes) { return t >= 0 && t < classes; }

// One position's loss against class t. Cross-entropy: (1 - eps) * -log p[t] +
// eps * mean_c(-log p[c]), with -log p[c] = lse - logit[c]; eps == 0 skips the
// mean so that a masked (-inf) logit does not make the loss 0 * inf = NaN.
template <LossKind kind, int L, class T, class S>
__device__ double position_loss(const LossArgs<T, S>& a, const S* row, int64_t t, int lane) {
  if constexpr (kind == LossKind::Nll) {
    return -static_cast<double>(score_of<T>(row + t * a.score_step));
  } else {
    const double lse = row_log_sum_exp<L, T>(row, a.classes, a.score_step, lane);
    double loss = (1.0 - a.eps) * (lse - score_of<T>(row + t * a.score_step));
    if (a.eps > 0.0) {
      const double mean = row_sum<L, T>(row, a.classes, a.score_step, lane) / double(a.classes);
      loss += a.eps * (lse - mean);
    }
    return loss;
  }
}

// The block's total, added in a fixed tree order so that it never varies.
__device__ LossPartial block_total(LossPartial mine) {
  return block_reduce(mine, [](LossPartial x, LossPartial y) {
    return LossPartial{x.sum + y.sum, x.count + y.count};
  });
}

// Keeps the smallest bad position, so that the error names the first one.
__device__ void flag_bad_target(LossTotals* totals, int64_t p) {
  atomicMin(&totals->first_bad_position, static_cast<unsigned long long>(p));
}

// The totals, and the reduced loss (rounded once from double, as the CPU
// reference does); called by one thread.
template <class T>
__device__ void write_totals(const LossPartial& total, const LossOutputs& out) {
  out.totals->sum = total.sum;
  out.totals->count = total.count;
  if (out.reduced != nullptr) {
    const double value = out.mean ? total.sum / static_cast<double>(total.count) : total.sum;
    *static_cast<T*>(out.reduced) = static_cast<T>(value);
  }
}

// losses[p] for every position p, 0 where ignored; the group's first lane
// writes and totals. An out-of-range target gets a NaN loss and is flagged.
// A grid of one block writes the totals itself (no second kernel) and resets
// the flag first (no memset); more blocks leave partials for loss_totals_kernel.
template <LossKind kind, int L, class T, class S>
__global__ void loss_forward_kernel(LossArgs<T, S> a, LossOutputs out) {
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) a.totals->first_bad_position = ~0ull;
    __syncthreads();
  }
  const int lane = threadIdx.x % L;
  const int64_t first = first_index() / L, step = index_step() / L;
  LossPartial mine{0.0, 0};
  for (int64_t p = first; p < a.positions; p += step) {
    int64_t o[kOperands];
    for (int k = 0; k < kOperands; ++k) o[k] = offset_of(p, a.at[k]);
    const int64_t t = a.target[o[kTarget]];
    double loss = 0.0;
    if (t != a.ignore_index && !is_class(t, a.classes)) {
      loss = NAN;
      if (lane == 0) {
        flag_bad_target(a.totals, p);
        mine.sum += loss;  // so that a reduced loss says it too
        ++mine.count;
      }
    } else if (t != a.ignore_index) {
      loss = position_loss<kind, L>(a, a.scores + o[kScores], t, lane);
      if (lane == 0) {
        mine.sum += loss;
        ++mine.count;
      }
    }
    if (lane == 0) a.out[o[kOut]] = static_cast<T>(loss);
  }
  const LossPartial total = block_total(mine);
  if (threadIdx.x != 0) return;
  if (gridDim.x == 1) {
    write_totals<T>(total, out);
  } else {
    a.scratch->partials[blockIdx.x] = total;
  }
}

// The totals of the first `blocks` partials; launched as one block.
template <class T>
__global__ void loss_totals_kernel(const LossScratch* scratch, int blocks, LossOutputs out) {
  LossPartial mine{0.0, 0};
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
    mine.sum += scratch->partials[b].sum;
    mine.count += scratch->partials[b].count;
  }
  const LossPartial total = block_total(mine);
  if (threadIdx.x == 0) write_totals<T>(total, out);
}

// What multiplies dloss: a mean divides by the count of non-ignored targets
// (when it is 0 every position is ignored, so the infinite scale is unused).
__device__ double scale_of(const LossScale& s) {
  return s.mean ? 1.0 / static_cast<double>(s.totals->count) : 1.0;
}

// Cross-entropy's gradient at one position times g: (softmax(logits) -
// (1 - eps) * onehot(t) - eps / C) * g.
template <int L, class T, class S>
__device__ void smoothed_nll_backward(const LossArgs<T, S>& a, S* drow, const S* row, int64_t t, T g,
                                      int lane) {
  const T lse = row_log_sum_exp<L, T>(row, a.classes, a.score_step, lane);
  const T off_target = static_cast<T>(a.eps / double(a.classes));
  const T on_target = static_cast<T>(1.0 - a.eps);
  for (int64_t c = lane; c < a.classes; c += L) {
    const T smoothed = c == t ? off_target + on_target : off_target;
    const T value = (exp_of(score_of<T>(row + c * a.score_step) - lse) - smoothed) * g;
    drow[c * a.out_step] = from_compute<S>(value);
  }
}

// dscores rows: 0 where ignored, NaN where the target is out of range (never
// used as an index), else the loss's gradient times dloss * scale.
template <LossKind kind, int L, class T, class S>
__global__ void loss_backward_kernel(LossArgs<T, S> a) {
  const int lane = threadIdx.x % L;
  const int64_t first = first_index() / L, step = index_step() / L;
  const double scale = scale_of(a.scale);
  for (int64_t p = first; p < a.positions; p += step) {
    int64_t o[kOperands];
    for (int k = 0; k < kOperands; ++k) o[k] = offset_of(p, a.at[k]);
    const int64_t t = a.target[o[kTarget]];
    S* drow = a.dscores + o[kOut];
    if (t == a.ignore_index) {
      fill_row<L>(drow, a.classes, a.out_step, 0.0f, lane);
      continue;
    }
    if (!is_class(t, a.classes)) {
      fill_row<L>(drow, a.classes, a.out_step, NAN, lane);
      continue;
    }
    const T g = static_cast<T>(static_cast<double>(a.dloss[o[kDloss]]) * scale);
    if constexpr (kind == LossKind::Nll) {
      for (int64_t c = lane; c < a.classes; c += L) drow[c * a.out_step] = from_compute<S>(c == t ? -g : T(0));
    } else {
      smoothed_nll_backward<L>(a, drow, a.scores + o[kScores], t, g, lane);
    }
  }
}

// ---- host side ----------------------------------------------------------------

// Strides of a (N, C, d1...) operand over the positions: without the class dim.
Shape position_strides(const Strided& scores) {
  Shape strides = scores.strides;
  strides.erase(strides.begin() + 1);
  return strides;
}

// What a launch reads and writes; pointers left null are not used.
struct LossOperands {
  const Strided* target;
  const Strided* scores;  // null for NLL backward
  const Strided* out;     // losses (forward) or dscores (backward)
  const Strided* dloss;   // null for the forward
};

template <class T, class S>
LossArgs<T, S> args_of(const LossOperands& ops, int64_t ignore_index) {
  LossArgs<T, S> a{};
  const bool backward = ops.dloss != nullptr;
  const Strided& classed = backward ? *ops.out : *ops.scores;  // an (N, C, d1...) operand
  a.target = ops.target->ptr<int64_t>();
  a.positions = ops.target->numel();
  a.classes = classed.sizes[1];
  a.ignore_index = ignore_index;
  const Shape& sizes = ops.target->sizes;
  a.at[kTarget] = geometry_of(*ops.target);
  if (ops.scores != nullptr) {
    a.scores = ops.scores->ptr<S>();
    a.score_step = ops.scores->strides[1];
    a.at[kScores] = geometry_of(sizes, position_strides(*ops.scores));
  }
  if (backward) {
    a.dscores = ops.out->ptr<S>();
    a.out_step = ops.out->strides[1];
    a.at[kOut] = geometry_of(sizes, position_strides(*ops.out));
    a.dloss = ops.dloss->ptr<T>();
    a.at[kDloss] = geometry_of(sizes, ops.dloss->strides);
  } else {
    a.out = ops.out->ptr<T>();
    a.at[kOut] = geometry_of(sizes, ops.out->strides);
  }
  return a;
}

// fn.template operator()<T, S>(): T the losses' dtype (float or double), S the
// scores' storage: T, or a 16-bit format under float losses.
template <class Fn>
void visit_loss_types(DType loss_dtype, DType scores_dtype, Fn&& fn) {
  visit_float(loss_dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) {
      if (scores_dtype == DType::BFloat16) return fn.template operator()<T, __nv_bfloat16>();
      if (scores_dtype == DType::Float16) return fn.template operator()<T, __half>();
    }
    fn.template operator()<T, T>();
  });
}

// Several lanes per position when a row is contiguous and long enough to give
// each lane a class, so that their loads coalesce (8 for short rows, where a
// warp would idle); one thread otherwise. A row of a few classes is a few
// neighbouring words, which neighbouring threads' rows continue: one thread per
// position reads them as coalesced, and 8 lanes would leave 6 of 8 idle on a
// two-class segmentation map while each still walks its positions (a U-Net's
// 2.1M positions at batch 512: 0.6 ms per step for forward and backward).
int lanes_for(int64_t classes, int64_t class_stride) {
  if (class_stride != 1 || classes < 8) return 1;
  return classes < 64 ? 8 : kWarpSize;
}

template <class Fn>
void visit_lanes(int lanes, Fn&& fn) {
  switch (lanes) {
    case 1: fn.template operator()<1>(); break;
    case 8: fn.template operator()<8>(); break;
    default: fn.template operator()<kWarpSize>(); break;
  }
}

// Capped at kMaxLossBlocks, the forward's partials; grid-stride loops do the rest.
int loss_blocks(int64_t positions, int lanes) {
  const int64_t blocks = (positions * lanes + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<int64_t>(blocks, kMaxLossBlocks));
}

// Up to kOneBlockPasses passes of one block's threads take one forward block,
// which then also writes the totals: a small batch's loss is one kernel, not two.
constexpr int kOneBlockPasses = 8;
int forward_blocks(int64_t positions, int lanes) {
  const int blocks = loss_blocks(positions, lanes);
  return blocks <= kOneBlockPasses ? 1 : blocks;
}

template <LossKind kind>
cudaError_t launch_forward(const LossOperands& ops, int64_t ignore_index, double eps, int lanes,
                           const LossOutputs& out, LossScratch* scratch, cudaStream_t stream) {
  const int64_t positions = ops.target->numel();
  const int blocks = positions == 0 ? 0 : forward_blocks(positions, lanes);
  cudaError_t status = cudaSuccess;
  if (blocks != 1) {
    status = cudaMemsetAsync(&out.totals->first_bad_position, 0xff, sizeof(unsigned long long), stream);
    if (status != cudaSuccess) return status;
  }
  visit_loss_types(ops.out->dtype, ops.scores->dtype, [&]<class T, class S>() {
    if (blocks > 0) {
      LossArgs<T, S> a = args_of<T, S>(ops, ignore_index);
      a.eps = eps;
      a.scratch = scratch;
      a.totals = out.totals;
      visit_lanes(lanes, [&]<int L>() {
        loss_forward_kernel<kind, L, T, S><<<blocks, kThreads, 0, stream>>>(a, out);
      });
      status = cudaGetLastError();
    }
    if (status == cudaSuccess && blocks != 1) {
      loss_totals_kernel<T><<<1, kThreads, 0, stream>>>(scratch, blocks, out);
      status = cudaGetLastError();
    }
  });
  return status;
}

template <LossKind kind>
cudaError_t launch_backward(const LossOperands& ops, int64_t ignore_index, double eps,
                            const LossScale& scale, cudaStream_t stream) {
  const int64_t positions = ops.target->numel();
  if (positions == 0) return cudaSuccess;
  const int lanes = lanes_for(ops.out->sizes[1], ops.out->strides[1]);
  visit_loss_types(ops.dloss->dtype, ops.out->dtype, [&]<class T, class S>() {
    LossArgs<T, S> a = args_of<T, S>(ops, ignore_index);
    a.eps = eps;
    a.scale = scale;
    visit_lanes(lanes, [&]<int L>() {
      loss_backward_kernel<kind, L, T, S><<<loss_blocks(positions, L), kThreads, 0, stream>>>(a);
    });
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cross_entropy_forward(const Strided& losses, const Strided& logits,
                                         const Strided& target,
                                         const kernel::CrossEntropyParams& params,
                                         const LossOutputs& out, LossScratch* scratch,
                                         cudaStream_t stream) {
  const int lanes = lanes_for(logits.sizes[1], logits.strides[1]);
  return launch_forward<LossKind::CrossEntropy>({&target, &logits, &losses, nullptr},
                                                params.ignore_index, params.label_smoothing, lanes,
                                                out, scratch, stream);
}

cudaError_t launch_cross_entropy_backward(const Strided& dlogits, const Strided& logits,
                                          const Strided& target, const Strided& dloss,
                                          const LossScale& scale,
                                          const kernel::CrossEntropyParams& params,
                                          cudaStream_t stream) {
  return launch_backward<LossKind::CrossEntropy>({&target, &logits, &dlogits, &dloss},
                                                 params.ignore_index, params.label_smoothing, scale,
                                                 stream);
}

cudaError_t launch_nll_loss_forward(const Strided& losses, const Strided& log_probs,
                                    const Strided& target, int64_t ignore_index,
                                    const LossOutputs& out, LossScratch* scratch,
                                    cudaStream_t stream) {
  // One read per position: a thread each, whatever the layout.
  return launch_forward<LossKind::Nll>({&target, &log_probs, &losses, nullptr}, ignore_index, 0.0,
                                       /*lanes=*/1, out, scratch, stream);
}

cudaError_t launch_nll_loss_backward(const Strided& dlog_probs, const Strided& target,
                                     const Strided& dloss, const LossScale& scale,
                                     int64_t ignore_index, cudaStream_t stream) {
  return launch_backward<LossKind::Nll>({&target, nullptr, &dlog_probs, &dloss}, ignore_index, 0.0,
                                        scale, stream);
}

}  // namespace loom::cuda
