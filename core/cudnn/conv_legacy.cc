// File: core/cudnn/conv_legacy.cc
// The legacy-API convolution tier of conv_legacy.h: descriptors from the
// Strided views, the _v7 heuristics filtered by the numerics policy, a test run
// of each candidate until one succeeds, and a per-key cache of the choice.
//
// N batch, C in channels, H, W input, K out channels, R, S filter, P, Q output.
#include "core/cudnn/conv_legacy.h"

#include <fmt/format.h>

#include <array>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/cudnn/backend.h"
#include "core/cudnn/context.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"
#include "core/numerics.h"
#include "core/shape.h"

namespace loom::cudnn {

namespace {

template <class Raw, cudnnStatus_t (*Destroy)(Raw)>
struct Destroyer {
  void operator()(Raw raw) const { Destroy(raw); }
};
using TensorDesc = std::unique_ptr<cudnnTensorStruct,
                                   Destroyer<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>>;
using FilterDesc = std::unique_ptr<cudnnFilterStruct,
                                   Destroyer<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>>;
using ConvDesc = std::unique_ptr<cudnnConvolutionStruct,
                                 Destroyer<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>>;

TensorDesc tensor_desc(const Strided& t) {
  cudnnTensorDescriptor_t raw = nullptr;
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&raw));
  TensorDesc desc(raw);
  const TensorSpec spec = spec_of(t, 0);
  std::array<int, 4> dims{}, strides{};
  for (int d = 0; d < 4; ++d) {
    dims[d] = static_cast<int>(spec.dims[d]);
    strides[d] = static_cast<int>(spec.strides[d]);
  }
  LOOM_CUDNN_CHECK(cudnnSetTensorNdDescriptor(raw, cudnn_dtype(t.dtype), 4, dims.data(), strides.data()));
  return desc;
}

// A filter dense in both layouts (depthwise, (K, 1, R, S)) takes the data's:
// NCHW beside NHWC data leaves cuDNN only its generic grouped kernels.
FilterDesc filter_desc(const Strided& w, const Strided& x, const Strided& y) {
  cudnnFilterDescriptor_t raw = nullptr;
  LOOM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&raw));
  FilterDesc desc(raw);
  const bool either = has_layout(w.sizes, w.strides, MemoryFormat::ChannelsLast) &&
                      has_layout(w.sizes, w.strides, MemoryFormat::Contiguous);
  auto nhwc_only = [](const Strided& t) { return channels_last_only(t.sizes, t.strides); };
  const bool nhwc = nhwc_only(w) || (either && (nhwc_only(x) || nhwc_only(y)));
  LOOM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      raw, cudnn_dtype(w.dtype), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
      static_cast<int>(w.sizes[0]), static_cast<int>(w.sizes[1]), static_cast<int>(w.sizes[2]),
      static_cast<int>(w.sizes[3])));
  return desc;
}

ConvDesc conv_desc(const kernel::ConvParams& p, DType dtype, int64_t groups) {
  cudnnConvolutionDescriptor_t raw = nullptr;
  LOOM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&raw));
  ConvDesc desc(raw);
  const cudnnDataType_t compute = dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  LOOM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      raw, static_cast<int>(p.pad_h), static_cast<int>(p.pad_w), static_cast<int>(p.stride_h),
      static_cast<int>(p.stride_w), static_cast<int>(p.dilation_h), static_cast<int>(p.dilation_w),
      CUDNN_CROSS_CORRELATION, compute));
  LOOM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(raw, static_cast<int>(groups)));
  return desc;
}

// One algorithm the heuristics offer, in the three directions' common terms.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
};

// Winograd transforms lose accuracy on fp32 data, without a note that says so.
bool is_winograd(ConvDirection direction, int algo) {
  switch (direction) {
    case ConvDirection::Forward:
      return algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case ConvDirection::BackwardData:
      return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
             algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    case ConvDirection::BackwardFilter:
      return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  return false;
}

bool is_16bit(DType dtype) { return dtype == DType::BFloat16 || dtype == DType::Float16; }

// The math the policy allows: FMA only for fp32 data under strict fp32
// (CUDNN_DEFAULT_MATH lets fp32 run as TF32), tensor cores for 16-bit data.
cudnnMathType_t policy_math(DType dtype, const NumericsPolicy& policy) {
  if (is_16bit(dtype)) return CUDNN_TENSOR_OP_MATH;
  return policy.precision == Precision::StrictFp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// The policy on legacy candidates (each runs with policy_math): fp32 data never
// convert to fp16, and under strict fp32 skip Winograd.
bool allowed(const Candidate& c, ConvDirection direction, DType dtype, const NumericsPolicy& policy) {
  if (c.status != CUDNN_STATUS_SUCCESS) return false;
  if (policy.deterministic && c.determinism != CUDNN_DETERMINISTIC) return false;
  if (is_16bit(dtype)) return true;
  if (c.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return policy.precision != Precision::StrictFp32 || !is_winograd(direction, c.algo);
}

// Which algorithms a call may take: the policy's (conv2d_legacy) or the
// non-fused Winograd one alone (conv2d_winograd, which its caller admitted).
enum class Pick { Policy, Winograd };

bool is_winograd_nonfused(ConvDirection direction, int algo) {
  return (direction == ConvDirection::BackwardData && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED) ||
         (direction == ConvDirection::BackwardFilter && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED);
}

bool picked(Pick pick, const Candidate& c, ConvDirection direction, DType dtype, const NumericsPolicy& policy) {
  if (pick == Pick::Policy) return allowed(c, direction, dtype, policy);
  return c.status == CUDNN_STATUS_SUCCESS && is_winograd_nonfused(direction, c.algo);
}

template <class Perf>
std::vector<Candidate> candidates_of(const std::vector<Perf>& perfs, int count) {
  std::vector<Candidate> out;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perfs[i];
    out.push_back({static_cast<int>(p.algo), p.status, p.memory, p.determinism, p.mathType});
  }
  return out;
}

struct Descriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
};

std::vector<Candidate> heuristics(ConvDirection direction, const Descriptors& d) {
  constexpr int kMax = 16;  // more than cuDNN has algorithms in any direction
  int count = 0;
  switch (direction) {
    case ConvDirection::Forward: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(kMax);
      LOOM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
          handle(), d.x.get(), d.w.get(), d.conv.get(), d.y.get(), kMax, &count, perfs.data()));
      return candidates_of(perfs, count);
    }
    case ConvDirection::BackwardData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(kMax);
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle(), d.w.get(), d.y.get(), d.conv.get(), d.x.get(), kMax, &count, perfs.data()));
      return candidates_of(perfs, count);
    }
    case ConvDirection::BackwardFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(kMax);
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          handle(), d.x.get(), d.y.get(), d.conv.get(), d.w.get(), kMax, &count, perfs.data()));
      return candidates_of(perfs, count);
    }
  }
  return {};
}

// Runs one candidate; the status says whether it could.
cudnnStatus_t execute(ConvDirection direction, const Descriptors& d, const Candidate& c,
                      const Strided& x, const Strided& w, const Strided& y) {
  if (cudnnStatus_t s = cudnnSetConvolutionMathType(d.conv.get(), c.math); s != CUDNN_STATUS_SUCCESS) {
    return s;
  }
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool wide = x.dtype == DType::Float64;
  const void* one = wide ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = wide ? static_cast<const void*>(&zero_d) : &zero_f;
  const Workspace workspace(c.memory);
  void* space = workspace.get();
  switch (direction) {
    case ConvDirection::Forward:
      return cudnnConvolutionForward(handle(), one, d.x.get(), x.data, d.w.get(), w.data, d.conv.get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), space, c.memory,
                                     zero, d.y.get(), y.data);
    case ConvDirection::BackwardData:
      return cudnnConvolutionBackwardData(handle(), one, d.w.get(), w.data, d.y.get(), y.data,
                                          d.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                          space, c.memory, zero, d.x.get(), x.data);
    case ConvDirection::BackwardFilter:
      return cudnnConvolutionBackwardFilter(handle(), one, d.x.get(), x.data, d.y.get(), y.data,
                                            d.conv.get(),
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), space,
                                            c.memory, zero, d.w.get(), w.data);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// The chosen algorithm per configuration: pick, device, direction, policy, dtype, the three
// tensors' dims and strides and the conv parameters.
using ChoiceKey = std::vector<int64_t>;

ChoiceKey choice_key(Pick pick, ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                     const kernel::ConvParams& p) {
  const NumericsPolicy& policy = numerics_policy();
  ChoiceKey key{static_cast<int64_t>(pick), cuda::current_device(), static_cast<int64_t>(direction),
                static_cast<int64_t>(policy.precision), policy.deterministic,
                static_cast<int64_t>(x.dtype)};
  for (const Strided* t : {&x, &w, &y}) {
    const TensorSpec spec = spec_of(*t, 0);
    key.insert(key.end(), spec.dims.begin(), spec.dims.end());
    key.insert(key.end(), spec.strides.begin(), spec.strides.end());
  }
  key.insert(key.end(), {p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w});
  return key;
}

struct ChoiceCache {
  std::mutex mutex;
  std::map<ChoiceKey, std::optional<Candidate>> choices;  // nullopt: none works
};

ChoiceCache& choice_cache() {
  static ChoiceCache cache;
  return cache;
}

// A dense NCHW device copy of a tensor, for the legacy algorithms that take no
// NHWC (grouped and depthwise dgrad and wgrad offer none in cuDNN 9.19).
class NchwCopy {
 public:
  explicit NchwCopy(const Strided& like) : view_(like) {
    view_.strides = contiguous_strides(like.sizes);
    view_.data = cuda::malloc_device(static_cast<size_t>(like.numel()) * element_size(like.dtype),
                                     device_);
  }
  ~NchwCopy() { cuda::free_device(view_.data, device_); }
  NchwCopy(const NchwCopy&) = delete;
  NchwCopy& operator=(const NchwCopy&) = delete;
  const Strided& view() const { return view_; }

 private:
  int device_ = cuda::current_device();
  Strided view_;
};

bool is_nchw(const Strided& t) { return t.strides == contiguous_strides(t.sizes); }

// Chooses (once per key) and runs a legacy algorithm for tensors as they are.
std::string run_as_is(Pick pick, ConvDirection direction, const Strided& x, const Strided& w, const Strided& y,
                      const kernel::ConvParams& p);

// run_as_is, else on NCHW copies.
std::string run_legacy(Pick pick, ConvDirection direction, const Strided& x, const Strided& w,
                       const Strided& y, const kernel::ConvParams& p);

int64_t product(const Shape& sizes, std::initializer_list<int> dims) {
  int64_t n = 1;
  for (int d : dims) n *= sizes[d];
  return n;
}

}  // namespace

std::string conv2d_legacy(ConvDirection direction, const Strided& x, const Strided& w,
                          const Strided& y, const kernel::ConvParams& p) {
  return run_legacy(Pick::Policy, direction, x, w, y, p);
}

bool winograd_admitted(ConvDirection direction, const Strided& x, const Strided& w, const Strided& y) {
  const NumericsPolicy& policy = numerics_policy();
  if (policy.precision != Precision::StrictFp32 || policy.deterministic || x.dtype != DType::Float32 ||
      x.sizes[1] != w.sizes[1] || w.sizes[2] != 3 || w.sizes[3] != 3) {
    return false;
  }
  switch (direction) {
    case ConvDirection::BackwardData: return product(w.sizes, {0, 2, 3}) <= kWinogradMaxDgradSum;
    case ConvDirection::BackwardFilter: return product(y.sizes, {0, 2, 3}) <= kWinogradMaxWgradSum;
    case ConvDirection::Forward: return false;
  }
  return false;
}

std::string conv2d_winograd(ConvDirection direction, const Strided& x, const Strided& w,
                            const Strided& y, const kernel::ConvParams& p) {
  if (!winograd_admitted(direction, x, w, y)) {
    return "the non-fused Winograd algorithm is not admitted here (winograd_admitted, conv_legacy.h)";
  }
  return run_legacy(Pick::Winograd, direction, x, w, y, p);
}

namespace {

std::string run_legacy(Pick pick, ConvDirection direction, const Strided& x, const Strided& w,
                       const Strided& y, const kernel::ConvParams& p) {
  const std::string as_is = run_as_is(pick, direction, x, w, y, p);
  if (as_is.empty() || (is_nchw(x) && is_nchw(w) && is_nchw(y))) return as_is;
  // The inputs are copied in; the output is written into its copy and copied back.
  const Strided* out = direction == ConvDirection::Forward        ? &y
                       : direction == ConvDirection::BackwardData ? &x
                                                                  : &w;
  NchwCopy xc(x), wc(w), yc(y);
  for (const auto& [copy, original] : {std::pair{&xc, &x}, {&wc, &w}, {&yc, &y}}) {
    if (original != out) cuda::copy(copy->view(), *original);
  }
  const std::string nchw = run_as_is(pick, direction, xc.view(), wc.view(), yc.view(), p);
  if (!nchw.empty()) return fmt::format("{} as laid out; {} in NCHW copies", as_is, nchw);
  cuda::copy(*out, out == &y ? yc.view() : out == &x ? xc.view() : wc.view());
  return "";
}

std::string run_as_is(Pick pick, ConvDirection direction, const Strided& x, const Strided& w,
                      const Strided& y, const kernel::ConvParams& p) {
  // The key needs no descriptors: a cached "none ran" (a channels-last tensor's
  // as-is try, before its NCHW copies) returns without creating any.
  const ChoiceKey key = choice_key(pick, direction, x, w, y, p);
  ChoiceCache& cache = choice_cache();
  std::optional<std::optional<Candidate>> cached;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (auto it = cache.choices.find(key); it != cache.choices.end()) cached = it->second;
  }
  if (cached && !*cached) return "no legacy algorithm ran (cached)";
  const int64_t groups = x.sizes[1] / w.sizes[1];
  Descriptors d{tensor_desc(x), tensor_desc(y), filter_desc(w, x, y), conv_desc(p, x.dtype, groups)};
  if (cached) {
    LOOM_CUDNN_CHECK(execute(direction, d, **cached, x, w, y));
    return "";
  }
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.get(), policy_math(x.dtype, numerics_policy())));
  const std::vector<Candidate> candidates = heuristics(direction, d);
  int offered = 0, allowed_count = 0;
  std::optional<Candidate> chosen;
  for (Candidate c : candidates) {
    offered += c.status == CUDNN_STATUS_SUCCESS;
    if (!picked(pick, c, direction, x.dtype, numerics_policy())) continue;
    ++allowed_count;
    c.math = policy_math(x.dtype, numerics_policy());
    if (execute(direction, d, c, x, w, y) == CUDNN_STATUS_SUCCESS) {
      chosen = c;
      break;
    }
  }
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.choices[key] = chosen;
  if (chosen) return "";
  if (pick == Pick::Winograd) {
    return allowed_count == 0 ? "legacy API: the non-fused Winograd algorithm was not offered"
                              : "legacy API: the non-fused Winograd algorithm did not run";
  }
  return fmt::format("legacy API: {} algorithms offered, {} allowed by the numerics policy ({}{}), "
                     "none ran",
                     offered, allowed_count, precision_name(numerics_policy().precision),
                     numerics_policy().deterministic ? ", deterministic" : "");
}

}  // namespace

}  // namespace loom::cudnn
