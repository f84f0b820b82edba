// File: core/cuda/rnn.cu
// The recurrent step kernels: core/kernel/rnn.h's units, a thread each; and the
// whole-run kernels, which walk every step of a layer in one launch.
#include <algorithm>

#include "core/cuda/element.cuh"
#include "core/cuda/rnn_kernels.h"
#include "core/cuda/shared_memory.cuh"

namespace loom::cuda {

namespace {

constexpr int kThreads = 256;

struct Convert {
  template <class C, class S>
  __device__ static C in(S value) {
    return static_cast<C>(to_compute(value));
  }
  template <class S, class C>
  __device__ static S out(C value) {
    return from_compute<S>(static_cast<compute_t<S>>(value));
  }
};

template <class S, bool Forward>
__global__ void rnn_step_kernel(kernel::RnnRows<S> rows, int64_t units) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= units) return;
  const int64_t n = index / rows.hidden, j = index % rows.hidden;
  if constexpr (Forward) {
    kernel::rnn_forward_unit<compute_t<S>, Convert>(rows, n, j);
  } else {
    kernel::rnn_backward_unit<compute_t<S>, Convert>(rows, n, j);
  }
}

// A kernel::RnnRun as typed pointers (each view dense), and the RnnRows of one
// step for the samples of a block.
template <class S>
struct Run {
  using Rows = typename kernel::RnnRows<S>::Rows;
  RnnMode mode;
  bool reverse;
  int steps, batch, hidden, gates;  // L, N, H, G
  S *w_hh, *bias, *h0, *c0, *gx, *gate_values, *aux, *out, *dy, *dc, *dgx, *dgh, *dh0;

  // Rows n0.. of a dense (L, N, columns) tensor at time t.
  __device__ Rows at(S* base, int t, int64_t n0, int columns) const {
    return base == nullptr ? Rows{} : Rows{base + (int64_t(t) * batch + n0) * columns, columns};
  }
  // Step k's views for samples n0..; gh, dh and dh_direct live in the kernel's shared memory.
  __device__ kernel::RnnRows<S> step(int k, int64_t n0) const {
    const int t = reverse ? steps - 1 - k : k, before = reverse ? t + 1 : t - 1, H = hidden, GH = gates * H;
    kernel::RnnRows<S> r;
    r.mode = mode;
    r.hidden = H;
    r.gx = at(gx, t, n0, GH);
    r.bias = bias == nullptr ? Rows{} : Rows{bias, 1};
    r.gates = at(gate_values, t, n0, GH);
    r.aux = at(aux, t, n0, H);
    r.h = at(out, t, n0, H);
    r.dy = at(dy, t, n0, H);
    r.dc = dc == nullptr ? Rows{} : Rows{dc + n0 * H, H};
    r.dgx = at(dgx, t, n0, GH);
    r.dgh = at(dgh, t, n0, GH);
    if (mode == RnnMode::Lstm) r.prev = k == 0 ? Rows{c0 + n0 * H, H} : at(aux, before, n0, H);
    if (mode == RnnMode::Gru) r.prev = k == 0 ? Rows{h0 + n0 * H, H} : at(out, before, n0, H);
    return r;
  }
};

constexpr int kRunThreads = 1024;  // the most threads a block has

// How a block of a run lays out its threads and shared memory. A block takes
// `rows` samples; each (sample, unit) pair has `parts` threads, each summing
// every parts-th term of the unit's products, so that a step's serial chain is
// H / parts (forward) or G*H / parts (backward) terms long. Thread
// part * pairs + pair: a warp holds one part of consecutive pairs, so its
// W_hh reads are consecutive words and its h or dg reads one broadcast.
struct RunShape {
  int rows = 0, parts = 0;  // rows 0: the run does not fit
  int64_t blocks = 0, bytes = 0;
};

// Shared memory of a block, in this order (the float partial sums first, for
// their alignment): partial (parts, rows, G*H) in C, W_hh (G*H * H) in S, then
// two (rows, H) buffers and one (rows, G*H) in S.
template <class S>
int64_t run_bytes(int64_t rows, int64_t parts, int64_t hidden, int64_t gates) {
  const int64_t gh = gates * hidden;
  const int64_t partials = parts * rows * gh * int64_t(sizeof(compute_t<S>));
  return partials + (gh * hidden + rows * (2 * hidden + gh)) * int64_t(sizeof(S));
}

// The thread's place in a block of a run.
struct RunThread {
  int part, n, j;  // which part of the sums, the sample in the block, the unit
  __device__ RunThread(int rows, int hidden) {
    const int pairs = rows * hidden, pair = threadIdx.x % pairs;
    part = threadIdx.x / pairs;
    n = pair / hidden;
    j = pair % hidden;
  }
};

// The forward of a whole run. Each block keeps W_hh transposed in shared
// memory ((H, G*H)) and its samples' h, and walks every step: the parts of a
// (sample, unit) pair sum the unit's G products with h; after a barrier, part 0
// adds them up, rounds them to S as a matrix product's output is, and runs
// core/kernel/rnn.h's unit.
template <class S>
__global__ void __launch_bounds__(kRunThreads) rnn_run_forward_kernel(Run<S> run, int rows, int parts) {
  extern __shared__ __align__(16) unsigned char shared[];
  using C = compute_t<S>;
  const int H = run.hidden, GH = run.gates * H;
  C* partial = reinterpret_cast<C*>(shared);   // (parts, rows, G*H)
  S* w = reinterpret_cast<S*>(partial + parts * rows * GH);  // w[i * GH + c] = W_hh[c][i]
  S* h = w + GH * H;                           // (rows, H): h before the step, then after it
  S* gh = h + 2 * rows * H;                    // (rows, G*H): the step's products (after a spare (rows, H))
  for (int e = threadIdx.x; e < GH * H; e += blockDim.x) w[(e % H) * GH + e / H] = run.w_hh[e];
  const RunThread me(rows, H);
  const int n = me.n, j = me.j;
  const int64_t n0 = int64_t(blockIdx.x) * rows;
  const bool active = n0 + n < run.batch;
  if (active && me.part == 0) h[n * H + j] = run.h0[(n0 + n) * H + j];
  __syncthreads();
  for (int k = 0; k < run.steps; ++k) {
    if (active) {
      C acc[4] = {};
#pragma unroll 4
      for (int i = me.part; i < H; i += parts) {
        const C hi = to_compute(h[n * H + i]);
        const S* wi = w + i * GH + j;
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          if (g < run.gates) acc[g] += hi * to_compute(wi[g * H]);
        }
      }
      for (int g = 0; g < run.gates; ++g) partial[(me.part * rows + n) * GH + g * H + j] = acc[g];
    }
    __syncthreads();
    if (active && me.part == 0) {
      for (int g = 0; g < run.gates; ++g) {
        C sum = 0;
        for (int p = 0; p < parts; ++p) sum += partial[(p * rows + n) * GH + g * H + j];
        gh[n * GH + g * H + j] = from_compute<S>(sum);
      }
      kernel::RnnRows<S> r = run.step(k, n0);
      r.gh = {gh, GH};
      kernel::rnn_forward_unit<C, Convert>(r, n, j);
      h[n * H + j] = r.h[n][j];
    }
    __syncthreads();
  }
}

// The backward of a whole run, the steps in reverse: part 0 of each (sample,
// unit) pair runs the step's unit; after a barrier, the parts sum their terms
// of the unit's element of dgh W_hh; after another, part 0 adds them up (+ dh z
// for a GRU), rounded to S as the step-by-step product and sum are.
template <class S>
__global__ void __launch_bounds__(kRunThreads) rnn_run_backward_kernel(Run<S> run, int rows, int parts) {
  extern __shared__ __align__(16) unsigned char shared[];
  using C = compute_t<S>;
  const int H = run.hidden, GH = run.gates * H;
  C* partial = reinterpret_cast<C*>(shared);   // (parts, rows, H) of its (parts, rows, G*H)
  S* w = reinterpret_cast<S*>(partial + parts * rows * GH);  // W_hh as it is, (G*H, H)
  S* dh = w + GH * H;                          // (rows, H): h's gradient from the step after
  S* direct = dh + rows * H;                   // (rows, H): a GRU's dh z
  S* dg = direct + rows * H;                   // (rows, G*H): the gradient of the step's hidden product
  for (int e = threadIdx.x; e < GH * H; e += blockDim.x) w[e] = run.w_hh[e];
  const RunThread me(rows, H);
  const int n = me.n, j = me.j;
  const int64_t n0 = int64_t(blockIdx.x) * rows;
  const bool active = n0 + n < run.batch, lead = active && me.part == 0;
  if (lead) dh[n * H + j] = from_compute<S>(C(0));
  __syncthreads();
  for (int k = run.steps - 1; k >= 0; --k) {
    if (lead) {
      kernel::RnnRows<S> r = run.step(k, n0);
      r.dh = {dh, H};
      r.dh_direct = {direct, H};
      kernel::rnn_backward_unit<C, Convert>(r, n, j);
      const S* row = (run.mode == RnnMode::Gru ? r.dgh : r.dgx)[n];
      for (int g = 0; g < run.gates; ++g) dg[n * GH + g * H + j] = row[g * H + j];
    }
    __syncthreads();
    if (active) {
      C acc = 0;
#pragma unroll 4
      for (int c = me.part; c < GH; c += parts) acc += to_compute(dg[n * GH + c]) * to_compute(w[c * H + j]);
      partial[(me.part * rows + n) * H + j] = acc;
    }
    __syncthreads();
    if (lead) {
      C sum = 0;
      for (int p = 0; p < parts; ++p) sum += partial[(p * rows + n) * H + j];
      S value = from_compute<S>(sum);
      if (run.mode == RnnMode::Gru) value = from_compute<S>(to_compute(value) + to_compute(direct[n * H + j]));
      dh[n * H + j] = value;
    }
  }
  if (lead) run.dh0[(n0 + n) * H + j] = dh[n * H + j];
}

// One wave of blocks, each with W_hh and its samples' states in shared memory:
// the batch spread over the multiprocessors, then as many parts per pair as
// kRunThreads threads allow (a power of two).
template <class S>
cudaError_t run_shape(int64_t batch, int64_t hidden, int64_t gates, RunShape& shape) {
  shape = {};
  BlockLimits limits;
  cudaError_t status = block_limits(limits);
  if (status != cudaSuccess || batch == 0 || hidden > kRunThreads) return status;
  const int64_t rows = (batch + limits.multiprocessors - 1) / limits.multiprocessors;
  if (rows * hidden > kRunThreads) return cudaSuccess;
  int64_t parts = 1;
  while (2 * parts * rows * hidden <= kRunThreads) parts *= 2;
  const int64_t bytes = run_bytes<S>(rows, parts, hidden, gates);
  if (bytes > limits.shared_optin) return cudaSuccess;
  const int64_t blocks = (batch + rows - 1) / rows;
  const int threads = static_cast<int>(parts * rows * hidden);
  for (auto* function : {rnn_run_forward_kernel<S>, rnn_run_backward_kernel<S>}) {
    if (status = allow_shared_memory(function, limits.shared_optin); status != cudaSuccess) return status;
    if (resident_blocks(function, threads, bytes, status) < blocks) return status;
  }
  shape = {static_cast<int>(rows), static_cast<int>(parts), blocks, bytes};
  return cudaSuccess;
}

}  // namespace

cudaError_t rnn_run_fits(RnnMode mode, int64_t batch, int64_t hidden, DType dtype, bool& fits) {
  return visit_floating(dtype, [&]<class S>() {
    RunShape shape;
    const cudaError_t status = run_shape<S>(batch, hidden, kernel::rnn_gates(mode), shape);
    fits = shape.rows > 0;
    return status;
  });
}

cudaError_t launch_rnn_run(const kernel::RnnRun& run, bool forward, cudaStream_t stream) {
  const int64_t batch = run.h0.sizes[0], hidden = run.h0.sizes[1], gates = kernel::rnn_gates(run.mode);
  return visit_floating(run.h0.dtype, [&]<class S>() {
    RunShape shape;
    cudaError_t status = run_shape<S>(batch, hidden, gates, shape);
    if (status != cudaSuccess) return status;
    if (shape.rows == 0) return cudaErrorInvalidConfiguration;  // rnn_run_fits said no
    const Run<S> args{run.mode,          run.reverse,        static_cast<int>(run.out.sizes[0]),
                      static_cast<int>(batch), static_cast<int>(hidden), static_cast<int>(gates),
                      run.w_hh.ptr<S>(), run.bias.ptr<S>(), run.h0.ptr<S>(),
                      run.c0.ptr<S>(),   run.gx.ptr<S>(),   run.gates.ptr<S>(),
                      run.aux.ptr<S>(),  run.out.ptr<S>(),  run.dy.ptr<S>(),
                      run.dc.ptr<S>(),   run.dgx.ptr<S>(),  run.dgh.ptr<S>(),
                      run.dh0.ptr<S>()};
    const auto blocks = static_cast<unsigned>(shape.blocks);
    const auto threads = static_cast<unsigned>(shape.parts * shape.rows * hidden);
    if (forward) {
      rnn_run_forward_kernel<S><<<blocks, threads, shape.bytes, stream>>>(args, shape.rows, shape.parts);
    } else {
      rnn_run_backward_kernel<S><<<blocks, threads, shape.bytes, stream>>>(args, shape.rows, shape.parts);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_rnn_step(const kernel::RnnStep& step, int64_t samples, DType dtype, bool forward,
                            cudaStream_t stream) {
  const int64_t units = samples * step.hidden;
  if (units == 0) return cudaSuccess;
  const int blocks = static_cast<int>((units + kThreads - 1) / kThreads);
  return visit_floating(dtype, [&]<class S>() {
    const kernel::RnnRows<S> rows = kernel::rnn_rows<S>(step);
    if (forward) {
      rnn_step_kernel<S, true><<<blocks, kThreads, 0, stream>>>(rows, units);
    } else {
      rnn_step_kernel<S, false><<<blocks, kThreads, 0, stream>>>(rows, units);
    }
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
