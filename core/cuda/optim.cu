// File: core/cuda/optim.cu
// Multi-tensor kernels: one launch walks every chunk of every tensor in a slot
// table (a block per chunk, grid-stride over chunks), so an optimizer step costs
// one launch whatever the number of parameters. The update math mirrors the CPU
// reference loops in optim/sgd.cc, adam.cc, rmsprop.cc and adagrad.cc operation by operation, with
// explicitly rounded IEEE operations so that nvcc fuses nothing into an FMA: the
// GPU then rounds exactly as the CPU does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <variant>

#include "core/cuda/geometry.cuh"
#include "core/cuda/optim_kernels.h"

namespace loom::cuda {

namespace {

// ---- rounding as on the CPU: one rounding per operation, no contraction -------

__device__ inline float add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ inline double sqrt_rn(double a) { return __dsqrt_rn(a); }

// torch.lerp's formula: exact at both ends whatever the weight.
template <class T>
__device__ T lerp(T from, T to, T weight) {
  const T delta = add(to, -from);
  return fabs(weight) < T(0.5) ? add(from, mul(weight, delta))
                               : add(to, -mul(delta, add(T(1), -weight)));
}

// torch.maximum: NaN wins.
template <class T>
__device__ T max_nan(T a, T b) {
  return (a != a || a > b) ? a : b;
}

// ---- the chunk walk shared by every kernel ------------------------------------

// The slot that owns `chunk` (geometry.cuh's owner_of).
__device__ int slot_of(const TensorSlot* slots, int num_slots, int64_t chunk) {
  return owner_of(num_slots, chunk, [&](int a) { return slots[a].first_chunk; });
}

// Calls update(slot, i) for every element i of every slot.
template <class Update>
__device__ void walk_chunks(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                            const Update& update) {
  for (int64_t chunk = blockIdx.x; chunk < num_chunks; chunk += gridDim.x) {
    const TensorSlot slot = slots[slot_of(slots, num_slots, chunk)];  // into registers
    const int64_t begin = (chunk - slot.first_chunk) * kChunkSize;
    const int64_t end = std::min(begin + kChunkSize, slot.numel);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) update(slot, i);
  }
}

template <class Update>
__global__ void multi_tensor_kernel(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                    Update update) {
  walk_chunks(slots, num_slots, num_chunks, update);
}

// The update's scalars come from device memory: each thread builds its Update.
// A non-finite loss would write NaN into every weight and moment, so then every
// thread leaves them as they are (each reads the one float; it is cached).
template <class Update, class Scalars>
__global__ void multi_tensor_update_kernel(const TensorSlot* slots, int num_slots,
                                           int64_t num_chunks, const Scalars* scalars,
                                           const float* skip_unless_finite) {
  if (skip_unless_finite != nullptr && !isfinite(*skip_unless_finite)) return;
  walk_chunks(slots, num_slots, num_chunks, Update(*scalars));
}

__global__ void count_nonfinite_kernel(const float* loss, int64_t* counts) {
  const int64_t step = ++counts[0];
  if (isfinite(*loss)) return;
  if (counts[1] == 0) counts[2] = step;
  ++counts[1];
}

template <class Update>
cudaError_t launch_multi_tensor(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                const Update& update, cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  multi_tensor_kernel<<<blocks_for_groups(num_chunks), kThreads, 0, stream>>>(slots, num_slots,
                                                                            num_chunks, update);
  return cudaGetLastError();
}

template <class Update, class Scalars>
cudaError_t launch_update_kernel(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                 const Scalars* scalars, const float* skip_unless_finite,
                                 cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  multi_tensor_update_kernel<Update><<<blocks_for_groups(num_chunks), kThreads, 0, stream>>>(
      slots, num_slots, num_chunks, scalars, skip_unless_finite);
  return cudaGetLastError();
}

// ---- stores through kernel arguments (capturable, unlike host copies) ----------

constexpr int kSlotsPerStore = 64;  // 64 * 56 bytes: within the 4 KiB of kernel arguments

struct SlotBatch {
  TensorSlot slots[kSlotsPerStore];
};

__global__ void store_slots_kernel(TensorSlot* dst, SlotBatch batch, int count) {
  if (static_cast<int>(threadIdx.x) < count) dst[threadIdx.x] = batch.slots[threadIdx.x];
}

template <class T>
__global__ void store_kernel(T* dst, T value) {
  *dst = value;
}

// ---- the updates: what one element computes -------------------------------------

// torch.optim.SGD: weight decay into the gradient, momentum buffer (the first
// step copies the gradient), Nesterov look-ahead, then p -= lr * g.
template <class T>
struct SgdUpdate {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool use_momentum, use_weight_decay, nesterov, maximize, first_step;

  __device__ explicit SgdUpdate(const SgdScalars& s)
      : lr(T(s.lr)), momentum(T(s.momentum)), one_minus_dampening(T(add(1.0, -s.dampening))),
        weight_decay(T(s.weight_decay)), use_momentum(s.momentum != 0.0),
        use_weight_decay(s.weight_decay != 0.0), nesterov(s.nesterov), maximize(s.maximize),
        first_step(s.first_step) {}

  __device__ void operator()(const TensorSlot& slot, int64_t i) const {
    T* param = static_cast<T*>(slot.param);
    T g = static_cast<const T*>(slot.grad)[i];
    if (maximize) g = -g;
    if (use_weight_decay) g = add(g, mul(weight_decay, param[i]));
    if (use_momentum) {
      T* buffer = static_cast<T*>(slot.state[0]);
      const T b = first_step ? g : add(mul(buffer[i], momentum), mul(one_minus_dampening, g));
      buffer[i] = b;
      g = nesterov ? add(g, mul(momentum, b)) : b;
    }
    param[i] = add(param[i], mul(-lr, g));
  }
};

// torch.optim.Adam / AdamW (state: exp_avg, exp_avg_sq, max_exp_avg_sq).
template <class T>
struct AdamUpdate {
  T decay, weight_decay, one_minus_beta1, beta2, one_minus_beta2, eps, step_size,
      bias_correction2_sqrt;
  bool use_weight_decay, decoupled, amsgrad, maximize;

  __device__ explicit AdamUpdate(const AdamScalars& s)
      : decay(T(add(1.0, -mul(s.lr, s.weight_decay)))), weight_decay(T(s.weight_decay)),
        one_minus_beta1(T(add(1.0, -s.beta1))), beta2(T(s.beta2)),
        one_minus_beta2(T(add(1.0, -s.beta2))),
        eps(T(s.eps)), step_size(T(s.step_size)), bias_correction2_sqrt(T(s.bias_correction2_sqrt)),
        use_weight_decay(s.weight_decay != 0.0), decoupled(s.decoupled_weight_decay),
        amsgrad(s.amsgrad), maximize(s.maximize) {}

  __device__ void operator()(const TensorSlot& slot, int64_t i) const {
    T* param = static_cast<T*>(slot.param);
    T* exp_avg = static_cast<T*>(slot.state[0]);
    T* exp_avg_sq = static_cast<T*>(slot.state[1]);
    T g = static_cast<const T*>(slot.grad)[i];
    if (maximize) g = -g;
    T p = param[i];
    if (use_weight_decay) {
      if (decoupled) {
        p = mul(p, decay);
      } else {
        g = add(g, mul(weight_decay, p));
      }
    }
    const T m = lerp(exp_avg[i], g, one_minus_beta1);
    const T v = add(mul(exp_avg_sq[i], beta2), mul(one_minus_beta2, mul(g, g)));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T v_hat = v;
    if (amsgrad) {
      T* max_exp_avg_sq = static_cast<T*>(slot.state[2]);
      v_hat = max_nan(max_exp_avg_sq[i], v);
      max_exp_avg_sq[i] = v_hat;
    }
    const T denom = add(div(sqrt_rn(v_hat), bias_correction2_sqrt), eps);
    param[i] = add(p, mul(-step_size, div(m, denom)));
  }
};

// torch.optim.RMSprop (state: square_avg, momentum_buffer, grad_avg), as its
// foreach path rounds it: avg = sqrt(square_avg [- grad_avg^2]) + eps.
template <class T>
struct RmspropUpdate {
  T lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
  bool use_weight_decay, use_momentum, centered, maximize;

  __device__ explicit RmspropUpdate(const RmspropScalars& s)
      : lr(T(s.lr)), alpha(T(s.alpha)), one_minus_alpha(T(add(1.0, -s.alpha))), eps(T(s.eps)),
        weight_decay(T(s.weight_decay)), momentum(T(s.momentum)),
        use_weight_decay(s.weight_decay != 0.0), use_momentum(s.momentum > 0.0),
        centered(s.centered), maximize(s.maximize) {}

  __device__ void operator()(const TensorSlot& slot, int64_t i) const {
    T* param = static_cast<T*>(slot.param);
    T* square_avg = static_cast<T*>(slot.state[0]);
    T g = static_cast<const T*>(slot.grad)[i];
    if (maximize) g = -g;
    if (use_weight_decay) g = add(g, mul(weight_decay, param[i]));
    const T v = add(mul(square_avg[i], alpha), mul(one_minus_alpha, mul(g, g)));
    square_avg[i] = v;
    T variance = v;
    if (centered) {
      T* grad_avg = static_cast<T*>(slot.state[2]);
      const T m = lerp(grad_avg[i], g, one_minus_alpha);
      grad_avg[i] = m;
      variance = add(v, -mul(m, m));
    }
    const T step = div(g, add(sqrt_rn(variance), eps));
    if (!use_momentum) {
      param[i] = add(param[i], mul(-lr, step));
      return;
    }
    T* buffer = static_cast<T*>(slot.state[1]);
    const T b = add(mul(buffer[i], momentum), step);
    buffer[i] = b;
    param[i] = add(param[i], mul(-lr, b));
  }
};

// torch.optim.Adagrad (state: sum), as its foreach path rounds it:
// p + (g * -lr) / (sqrt(sum) + eps), lr already decayed for the step.
template <class T>
struct AdagradUpdate {
  T minus_lr, weight_decay, eps;
  bool use_weight_decay, maximize;

  __device__ explicit AdagradUpdate(const AdagradScalars& s)
      : minus_lr(T(-s.lr)), weight_decay(T(s.weight_decay)), eps(T(s.eps)),
        use_weight_decay(s.weight_decay != 0.0), maximize(s.maximize) {}

  __device__ void operator()(const TensorSlot& slot, int64_t i) const {
    T* param = static_cast<T*>(slot.param);
    T* sum = static_cast<T*>(slot.state[0]);
    T g = static_cast<const T*>(slot.grad)[i];
    if (maximize) g = -g;
    if (use_weight_decay) g = add(g, mul(weight_decay, param[i]));
    const T v = add(sum[i], mul(g, g));
    sum[i] = v;
    param[i] = add(param[i], div(mul(g, minus_lr), add(sqrt_rn(v), eps)));
  }
};

// The update of each alternative of UpdateScalars, in the variant's order: a
// new optimizer adds its Update here and one LOOM_UPDATE_LAUNCHERS line below.
template <class T>
using Updates = std::tuple<SgdUpdate<T>, AdamUpdate<T>, RmspropUpdate<T>, AdagradUpdate<T>>;
static_assert(std::tuple_size_v<Updates<float>> == std::variant_size_v<UpdateScalars>,
              "one Update per alternative of UpdateScalars");

template <class Scalars, size_t I = 0>
constexpr size_t alternative_index() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, UpdateScalars>, Scalars>) {
    return I;
  } else {
    return alternative_index<Scalars, I + 1>();
  }
}

// Which update a type of scalars runs.
template <class Scalars, class T>
using UpdateOf = std::tuple_element_t<alternative_index<Scalars>(), Updates<T>>;

template <class T>
struct ScaleUpdate {
  T factor;
  __device__ void operator()(const TensorSlot& slot, int64_t i) const {
    T* x = static_cast<T*>(slot.param);
    x[i] = mul(x[i], factor);
  }
};

// ---- sum of squares: per-chunk partials, then one block adds them in order ------

template <class T>
__global__ void chunk_squares_kernel(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                     double* partials) {
  for (int64_t chunk = blockIdx.x; chunk < num_chunks; chunk += gridDim.x) {
    const TensorSlot slot = slots[slot_of(slots, num_slots, chunk)];  // into registers
    const T* x = static_cast<const T*>(slot.param);
    const int64_t begin = (chunk - slot.first_chunk) * kChunkSize;
    const int64_t end = std::min(begin + kChunkSize, slot.numel);
    double sum = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      sum += double(x[i]) * double(x[i]);
    }
    sum = block_reduce(sum, [](double a, double b) { return a + b; });
    if (threadIdx.x == 0) partials[chunk] = sum;
  }
}

__global__ void sum_partials_kernel(const double* partials, int64_t count, double* total) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_reduce(sum, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) total[0] = sum;
}

}  // namespace

cudaError_t launch_store_slots(TensorSlot* dst, const TensorSlot* src, int count,
                               cudaStream_t stream) {
  for (int first = 0; first < count; first += kSlotsPerStore) {
    const int n = std::min(kSlotsPerStore, count - first);
    SlotBatch batch;
    std::copy(src + first, src + first + n, batch.slots);
    store_slots_kernel<<<1, kSlotsPerStore, 0, stream>>>(dst + first, batch, n);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

template <class Scalars>
cudaError_t launch_store_scalars(Scalars* dst, const Scalars& value, cudaStream_t stream) {
  store_kernel<<<1, 1, 0, stream>>>(dst, value);
  return cudaGetLastError();
}

template <class Scalars>
cudaError_t launch_update(const TensorSlot* slots, int num_slots, int64_t num_chunks, DType dtype,
                          const Scalars* scalars, const float* skip_unless_finite,
                          cudaStream_t stream) {
  return visit_float(dtype, [&]<class T>() {
    using Update = UpdateOf<Scalars, T>;
    static_assert(std::is_constructible_v<Update, const Scalars&>, "Updates is out of the variant's order");
    return launch_update_kernel<Update>(slots, num_slots, num_chunks, scalars, skip_unless_finite, stream);
  });
}

// Both launchers for every alternative of UpdateScalars.
#define LOOM_UPDATE_LAUNCHERS(Scalars)                                                          \
  template cudaError_t launch_store_scalars(Scalars*, const Scalars&, cudaStream_t);            \
  template cudaError_t launch_update(const TensorSlot*, int, int64_t, DType, const Scalars*,    \
                                     const float*, cudaStream_t);
LOOM_UPDATE_LAUNCHERS(SgdScalars)
LOOM_UPDATE_LAUNCHERS(AdamScalars)
LOOM_UPDATE_LAUNCHERS(RmspropScalars)
LOOM_UPDATE_LAUNCHERS(AdagradScalars)
#undef LOOM_UPDATE_LAUNCHERS

cudaError_t launch_count_nonfinite(const float* loss, int64_t* counts, cudaStream_t stream) {
  count_nonfinite_kernel<<<1, 1, 0, stream>>>(loss, counts);
  return cudaGetLastError();
}

cudaError_t launch_scale(const TensorSlot* slots, int num_slots, int64_t num_chunks, DType dtype,
                         double factor, cudaStream_t stream) {
  return visit_float(dtype, [&]<class T>() {
    return launch_multi_tensor(slots, num_slots, num_chunks, ScaleUpdate<T>{T(factor)}, stream);
  });
}

cudaError_t launch_sum_of_squares(const TensorSlot* slots, int num_slots, int64_t num_chunks,
                                  DType dtype, double* partials, double* total,
                                  cudaStream_t stream) {
  if (num_chunks > 0) {
    visit_float(dtype, [&]<class T>() {
      chunk_squares_kernel<T>
          <<<blocks_for_groups(num_chunks), kThreads, 0, stream>>>(slots, num_slots, num_chunks,
                                                                   partials);
    });
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partials, num_chunks, total);
  return cudaGetLastError();
}

}  // namespace loom::cuda
