// File: core/cuda/blas.cc
// cuBLAS behind cuda::matmul: the batched Strided product planned as strided-
// batched GEMM calls, and the per-thread handle and workspace.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading
// dims; S a batch dim along which C repeats (stride 0).
#include "core/cuda/blas.h"

#include <fmt/format.h>

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/loop.h"
#include "core/cuda/allocator_purpose.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/numerics.h"

namespace loom::cuda {

namespace {

// cuBLAS's recommended workspace on Hopper; older GPUs use less of it.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The handle and workspace live as long as the thread, as cuDNN's do
// (core/cudnn/context.cc): destroying them at exit could race with queued work.
struct BlasState {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// The current device's: a handle and its workspace belong to one GPU.
BlasState& blas_state() {
  thread_local PerDevice<BlasState> states;
  return states.current();
}

// ---- how cuBLAS computes ----------------------------------------------------------

struct BlasMath {
  cublasComputeType_t compute;
  cublasMath_t mode;
};

// Pedantic math under StrictFp32 also rules out cuBLAS's emulated or
// reduced-precision paths, whatever the environment asks for. 16-bit operands
// are already rounded: they multiply on tensor cores and accumulate in fp32
// under every policy.
BlasMath math_of(DType dtype) {
  const Precision precision = numerics_policy().precision;
  const cublasMath_t mode =
      precision == Precision::StrictFp32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
  if (dtype == DType::Float64) return {CUBLAS_COMPUTE_64F, mode};
  if (dtype == DType::BFloat16 || dtype == DType::Float16) {
    return {CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH};
  }
  switch (precision) {
    case Precision::StrictFp32: return {CUBLAS_COMPUTE_32F, mode};
    case Precision::Tf32: return {CUBLAS_COMPUTE_32F_FAST_TF32, mode};
    case Precision::Bf16: return {CUBLAS_COMPUTE_32F_FAST_16BF, mode};
    case Precision::Fp16: return {CUBLAS_COMPUTE_32F_FAST_16F, mode};
  }
  return {CUBLAS_COMPUTE_32F, mode};
}

// ---- planning: matrices and batch dims --------------------------------------------

// Where cuBLAS finds one matrix of a view, by cpu::gemm's rule (gemm.cc): stored
// row-major with row stride ld, or (trans) column-major with column stride ld.
struct MatrixLayout {
  bool trans = false;
  int64_t ld = 1;
};

std::optional<MatrixLayout> matrix_layout(int64_t rows, int64_t cols, int64_t row_stride,
                                          int64_t col_stride) {
  // A dim of size 1 never steps, so its stride does not constrain the layout.
  if (col_stride == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? cols : row_stride;
    if (ld >= cols) return MatrixLayout{false, ld};
  }
  if (row_stride == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? rows : col_stride;
    if (ld >= rows) return MatrixLayout{true, ld};
  }
  return std::nullopt;
}

enum Operand { kA, kB, kC };

// One batch dim of the product: its size and each operand's stride along it.
struct BatchDim {
  int64_t size = 1;
  std::array<int64_t, 3> strides{};  // a, b, c
};

// The product as cuBLAS calls it: each operand's matrix strides, one strided
// batch per call, and the batch dims a host loop walks over.
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  std::array<std::array<int64_t, 2>, 3> matrix_strides{};  // (row, col) of a, b, c
  BatchDim batched;
  std::vector<BatchDim> looped;

  std::optional<MatrixLayout> layout(Operand op) const {
    const int64_t rows = op == kB ? k : m, cols = op == kA ? k : n;
    return matrix_layout(rows, cols, matrix_strides[op][0], matrix_strides[op][1]);
  }
};

// c += sum over s of a_s . b_s is one product a' (M, S*K) . b' (S*K, N) when a
// and b step over s as if K went on: one call instead of S accumulating ones.
// That is the usual gradient of a broadcast operand (db = a^T . dy summed over
// the batch, with a and dy dense).
void fold_into_k(GemmPlan& p, std::vector<BatchDim>& dims) {
  for (size_t i = dims.size(); i-- > 0;) {
    const BatchDim& s = dims[i];
    if (s.strides[kC] != 0) continue;
    // A K of 1 never steps, so its stride may become whatever s needs.
    const int64_t a_step = p.k == 1 ? s.strides[kA] : p.matrix_strides[kA][1];
    const int64_t b_step = p.k == 1 ? s.strides[kB] : p.matrix_strides[kB][0];
    if (s.strides[kA] != p.k * a_step || s.strides[kB] != p.k * b_step) continue;
    GemmPlan folded = p;
    folded.k *= s.size;
    folded.matrix_strides[kA][1] = a_step;
    folded.matrix_strides[kB][0] = b_step;
    if (!folded.layout(kA) || !folded.layout(kB)) continue;
    p = std::move(folded);
    dims.erase(dims.begin() + static_cast<int64_t>(i));
  }
}

// True when `outer` then `inner` walk every operand as one dim of both sizes.
bool steps_as_one(const BatchDim& outer, const BatchDim& inner) {
  for (int op = kA; op <= kC; ++op) {
    if (outer.strides[op] != inner.strides[op] * inner.size) return false;
  }
  return true;
}

// Merges batch dims that step as one, hands the largest dim along which c does
// not repeat to cuBLAS's strided batch, and leaves the rest to the host loop:
// the products along a dim where c repeats must run one after another.
void split_batch(GemmPlan& p, const std::vector<BatchDim>& dims) {
  std::vector<BatchDim> merged;
  for (const BatchDim& d : dims) {
    if (!merged.empty() && steps_as_one(merged.back(), d)) {
      merged.back() = {merged.back().size * d.size, d.strides};
    } else {
      merged.push_back(d);
    }
  }
  auto batched = merged.end();
  for (auto it = merged.begin(); it != merged.end(); ++it) {
    if (it->strides[kC] != 0 && (batched == merged.end() || it->size > batched->size)) {
      batched = it;
    }
  }
  if (batched != merged.end()) {
    p.batched = *batched;
    merged.erase(batched);
  }
  p.looped = std::move(merged);
}

// a, b and c satisfy cpu::is_blas_matrix; size-1 batch dims drop out.
GemmPlan plan_of(const Strided& c, const Strided& a, const Strided& b, bool accumulate) {
  const int64_t nd = c.dim();
  GemmPlan p;
  p.m = c.sizes[nd - 2];
  p.n = c.sizes[nd - 1];
  p.k = a.sizes[nd - 1];
  auto matrix_strides = [nd](const Strided& t) {
    return std::array<int64_t, 2>{t.strides[nd - 2], t.strides[nd - 1]};
  };
  p.matrix_strides = {matrix_strides(a), matrix_strides(b), matrix_strides(c)};
  std::vector<BatchDim> dims;
  for (int64_t d = 0; d < nd - 2; ++d) {
    if (c.sizes[d] != 1) dims.push_back({c.sizes[d], {a.strides[d], b.strides[d], c.strides[d]}});
  }
  if (accumulate) fold_into_k(p, dims);
  split_batch(p, dims);
  return p;
}

// ---- running the plan ---------------------------------------------------------------

// cuBLAS reads matrices column-major, so a row-major X (trans false) reads as
// X^T. These ops make it see X itself, or X^T.
cublasOperation_t op_as_is(const MatrixLayout& l) { return l.trans ? CUBLAS_OP_N : CUBLAS_OP_T; }
cublasOperation_t op_transposed(const MatrixLayout& l) {
  return l.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

char* element(const Strided& t, int64_t offset) {
  return static_cast<char*>(t.data) + offset * static_cast<int64_t>(element_size(t.dtype));
}

// alpha = 1 and beta (0, or 1 to accumulate), as double for fp64 compute, else float.
struct Scalars {
  float single[2];
  double wide[2];
  bool is_wide;
  const void* alpha() const { return is_wide ? static_cast<const void*>(wide) : single; }
  const void* beta() const { return is_wide ? static_cast<const void*>(wide + 1) : single + 1; }
};

Scalars scalars_of(DType dtype, bool accumulate) {
  const double beta = accumulate ? 1.0 : 0.0;
  return {{1.0f, static_cast<float>(beta)}, {1.0, beta}, dtype == DType::Float64};
}

cudaDataType data_type_of(DType dtype) {
  switch (dtype) {
    case DType::Float64: return CUDA_R_64F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

void run(const GemmPlan& p, const Strided& c, const Strided& a, const Strided& b, bool accumulate) {
  const MatrixLayout la = *p.layout(kA), lb = *p.layout(kB), lc = *p.layout(kC);
  const cudaDataType type = data_type_of(c.dtype);
  const Scalars s = scalars_of(c.dtype, accumulate);
  const BlasMath math = math_of(c.dtype);
  cublasHandle_t handle = blas_handle();
  LOOM_CUBLAS_CHECK(cublasSetMathMode(handle, math.mode));
  const std::array<int64_t, 3>& stride = p.batched.strides;
  Shape sizes, strides[3];
  for (const BatchDim& d : p.looped) {
    sizes.push_back(d.size);
    for (int op = kA; op <= kC; ++op) strides[op].push_back(d.strides[op]);
  }
  cpu::for_each_offset<3>(sizes, {&strides[kA], &strides[kB], &strides[kC]}, [&](const auto& o) {
    const char* pa = element(a, o[kA]);
    const char* pb = element(b, o[kB]);
    char* pc = element(c, o[kC]);
    if (lc.trans) {  // C stored column-major: C = A . B
      LOOM_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
          handle, op_as_is(la), op_as_is(lb), p.m, p.n, p.k, s.alpha(), pa, type, la.ld, stride[kA],
          pb, type, lb.ld, stride[kB], s.beta(), pc, type, lc.ld, stride[kC], p.batched.size,
          math.compute, CUBLAS_GEMM_DEFAULT));
    } else {  // C stored row-major reads as C^T = B^T . A^T
      LOOM_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
          handle, op_transposed(lb), op_transposed(la), p.n, p.m, p.k, s.alpha(), pb, type, lb.ld,
          stride[kB], pa, type, la.ld, stride[kA], s.beta(), pc, type, lc.ld, stride[kC],
          p.batched.size, math.compute, CUBLAS_GEMM_DEFAULT));
    }
  });
}

// A view cuBLAS can read as it is, or else a dense device copy of it, freed in
// stream order when this goes. Batch dims along which the view repeats keep
// stride 0, so a broadcast operand is not materialized.
class BlasOperand {
 public:
  BlasOperand(const Strided& view, bool copy_in) : view_(view) {
    if (cpu::is_blas_matrix(view)) return;
    const int64_t nd = view.dim();
    Shape stored = view.sizes;
    for (int64_t d = 0; d < nd - 2; ++d) {
      if (view.strides[d] == 0) stored[d] = 1;
    }
    Shape strides = contiguous_strides(stored);
    for (int64_t d = 0; d < nd - 2; ++d) {
      if (view.strides[d] == 0) strides[d] = 0;
    }
    device_ = current_device();
    buffer_ = malloc_device(numel_of(stored) * element_size(view.dtype), device_);
    view_ = {buffer_, view.dtype, view.sizes, strides};
    if (copy_in) copy(view_, view);
  }
  ~BlasOperand() {
    if (buffer_ != nullptr) free_device(buffer_, device_);
  }
  BlasOperand(const BlasOperand&) = delete;
  BlasOperand& operator=(const BlasOperand&) = delete;

  const Strided& view() const { return view_; }
  // Writes a dense copy back to `target`, the view this was made from.
  void copy_out(const Strided& target) const {
    if (buffer_ != nullptr) copy(target, view_);
  }

 private:
  Strided view_;
  void* buffer_ = nullptr;
  int device_ = 0;
};

}  // namespace

void check_cublas(cublasStatus_t status, const char* statement, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(fmt::format("[cublas] {} failed at {}:{}: {} ({})", statement, file, line,
                              cublasGetStatusString(status), static_cast<int>(status)));
}

cublasHandle_t blas_handle() {
  BlasState& s = blas_state();
  if (s.handle == nullptr || s.workspace == nullptr) {
    LOOM_CHECK(!is_capturing(), CudaError,
               "[cublas] this thread's first matrix product ran while a CUDA graph was being "
               "captured; run the step once outside capture first, so that the cuBLAS handle "
               "and workspace exist");
  }
  if (s.handle == nullptr) LOOM_CUBLAS_CHECK(cublasCreate(&s.handle));
  if (s.workspace == nullptr) {
    PurposeScope purpose(Purpose::Workspace);
    s.workspace = malloc_device(kWorkspaceBytes, current_device());
  }
  // cublasSetStream resets the workspace to cuBLAS's own pool, so ours goes after it.
  LOOM_CUBLAS_CHECK(cublasSetStream(s.handle, current_stream()));
  LOOM_CUBLAS_CHECK(cublasSetWorkspace(s.handle, s.workspace, kWorkspaceBytes));
  return s.handle;
}

void matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate) {
  if (c.numel() == 0) return;
  if (a.sizes.back() == 0) {  // an empty inner dim: every product is 0
    if (!accumulate) fill(c, 0.0);
    return;
  }
  const BlasOperand ao(a, /*copy_in=*/true), bo(b, /*copy_in=*/true);
  const BlasOperand co(c, /*copy_in=*/accumulate);
  run(plan_of(co.view(), ao.view(), bo.view(), accumulate), co.view(), ao.view(), bo.view(),
      accumulate);
  co.copy_out(c);
}

}  // namespace loom::cuda
