// File: core/cudnn/plan.cc
// Choosing, finalizing, test-running and executing an execution plan for a Graph.
#include "core/cudnn/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include "core/cuda/allocator_purpose.h"
#include "core/cuda/event_timer.h"
#include "core/cuda/random.h"
#include "core/cuda/runtime.h"
#include "core/cuda/stream.h"
#include "core/cudnn/plan_memory.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

// Device memory for test runs; freed when plan selection ends. The copies of a
// graph's tensors count as PlanTests in the peak's breakdown, a candidate's
// workspace as Workspace, as the op's own would.
class ScratchBuffer {
 public:
  explicit ScratchBuffer(size_t bytes, cuda::Purpose what = cuda::Purpose::PlanTests) : bytes_(bytes) {
    if (bytes_ == 0) return;
    cuda::PurposeScope purpose(what);
    ptr_ = cuda::malloc_device(bytes_, device_);
    LOOM_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes_, cuda::current_stream()));
  }
  ~ScratchBuffer() {
    if (ptr_) cuda::free_device(ptr_, device_);
  }
  ScratchBuffer(ScratchBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_), device_(o.device_) {}
  ScratchBuffer(const ScratchBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
  int device_ = cuda::current_device();  // the GPU the plan is selected on
};

size_t cudnn_element_size(cudnnDataType_t dtype) {
  switch (dtype) {
    case CUDNN_DATA_DOUBLE:
    case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8:
    case CUDNN_DATA_UINT8:
    case CUDNN_DATA_BOOLEAN: return 1;
    default: return 4;
  }
}

// Bytes spanned by a strided tensor (0 when it has no elements).
size_t span_bytes(const TensorSpec& t) {
  int64_t last = 0;
  for (size_t d = 0; d < t.dims.size(); ++d) {
    if (t.dims[d] == 0) return 0;
    last += (t.dims[d] - 1) * t.strides[d];
  }
  return static_cast<size_t>(last + 1) * cudnn_element_size(t.dtype);
}

// The pointer `operands` binds to `uid`; null when it binds none.
const void* bound_pointer(const VariantPointers& operands, int64_t uid) {
  for (const auto& [bound_uid, ptr] : operands) {
    if (bound_uid == uid) return ptr;
  }
  return nullptr;
}

// Which of the graph's device tensors (in graph order) test runs may bind as
// `operands` binds them (plan_memory.h); all false without operands.
std::vector<bool> operands_as_is(const Graph& graph, const VariantPointers* operands) {
  std::vector<BoundRange> ranges;
  std::vector<bool> bound;
  for (const TensorSpec& t : graph.tensors()) {
    if (t.is_virtual || t.by_value) continue;
    const void* ptr = operands != nullptr ? bound_pointer(*operands, t.uid) : nullptr;
    bound.push_back(ptr != nullptr);
    ranges.push_back({.uid = t.uid, .begin = reinterpret_cast<uintptr_t>(ptr), .bytes = ptr ? span_bytes(t) : 0});
  }
  std::vector<bool> as_is = bindable_as_is(ranges);
  for (size_t i = 0; i < as_is.size(); ++i) as_is[i] = as_is[i] && bound[i];
  return as_is;
}

// How a selection's test runs use their scratch: a run that only checks that a
// plan executes (an untimed selection, a restore) binds every tensor it does not
// take from the op to one zeroed buffer as large as the largest of them, since
// what it computes is thrown away; a timed one gives each tensor its own, so a
// candidate reads and writes as many bytes as it will in the step (aliased
// operands would hit the L2 cache where the step's do not), filled with values
// as a step's are (fill_like_data).
enum class Scratch { Shared, PerTensor };

// The Loom dtype of a cuDNN floating data type; nullopt for the others
// (integers, booleans), whose test copies stay zero.
std::optional<DType> floating_dtype(cudnnDataType_t dtype) {
  switch (dtype) {
    case CUDNN_DATA_FLOAT: return DType::Float32;
    case CUDNN_DATA_DOUBLE: return DType::Float64;
    case CUDNN_DATA_HALF: return DType::Float16;
    case CUDNN_DATA_BFLOAT16: return DType::BFloat16;
    default: return std::nullopt;
  }
}

// Fills a timed candidate's copy of t with values uniform in [-1, 1), as a step's
// data are. A tensor-core kernel's time depends on its operands' bits (on zeros
// the GPU draws less power and holds a higher clock), so zeros rank close
// candidates for a load the step never puts on the GPU; PyTorch's benchmark
// times on its own tensors. (On resnet18_cifar's 3x3 convolutions at batch 512
// in TF32, H200, configs within a few percent still swap places from run to run
// either way, and the step time did not change.)
void fill_like_data(const ScratchBuffer& buffer, const TensorSpec& t) {
  constexpr uint64_t kTestValuesSeed = 0x5eed;
  const std::optional<DType> dtype = floating_dtype(t.dtype);
  const size_t bytes = span_bytes(t);
  if (!dtype || bytes == 0) return;
  const auto n = static_cast<int64_t>(bytes / cudnn_element_size(t.dtype));
  const Strided flat{.data = buffer.get(), .dtype = *dtype, .sizes = {n}, .strides = {1}};
  cuda::fill_random(flat, {.low = -1, .span = 2}, {.seed = kTestValuesSeed});
}

// The largest of the graph's device tensors that scratch stands in for (those
// not bound `as_is`, in graph order): the one buffer of Scratch::Shared.
size_t largest_stand_in(const Graph& graph, const std::vector<bool>& as_is) {
  size_t largest = 0;
  size_t device_tensor = 0;
  for (const TensorSpec& t : graph.tensors()) {
    if (t.is_virtual || t.by_value) continue;
    if (!as_is[device_tensor++]) largest = std::max(largest, span_bytes(t));
  }
  return largest;
}

// What a candidate plan is tried on: the op's own tensors where `operands`
// (a build on the calling thread) binds them without sharing bytes, scratch
// standing in for the others; by-value scalars get their test values.
struct TestBindings {
  std::vector<ScratchBuffer> buffers;
  std::vector<double> doubles;  // by-value scalars
  std::vector<float> floats;
  std::vector<int64_t> int64s;  // (BN finalize's accumulation count)
  VariantPointers pointers;

  TestBindings(const Graph& graph, const VariantPointers* operands, Scratch scratch) {
    doubles.reserve(graph.tensors().size());
    floats.reserve(graph.tensors().size());
    int64s.reserve(graph.tensors().size());
    const std::vector<bool> as_is = operands_as_is(graph, operands);
    if (scratch == Scratch::Shared) buffers.emplace_back(largest_stand_in(graph, as_is));
    size_t device_tensor = 0;
    for (const TensorSpec& t : graph.tensors()) {
      if (t.is_virtual) continue;
      if (t.by_value) {
        bind_scalar(t);
        continue;
      }
      if (as_is[device_tensor++]) {
        pointers.push_back({t.uid, bound_pointer(*operands, t.uid)});
        continue;
      }
      if (scratch == Scratch::PerTensor) {
        buffers.emplace_back(span_bytes(t));
        fill_like_data(buffers.back(), t);
      }
      pointers.push_back({t.uid, buffers.back().get()});
    }
  }

 private:
  void bind_scalar(const TensorSpec& t) {
    if (t.dtype == CUDNN_DATA_DOUBLE) {
      doubles.push_back(t.scalar_for_testing);
      pointers.push_back({t.uid, &doubles.back()});
    } else if (t.dtype == CUDNN_DATA_INT64) {
      int64s.push_back(static_cast<int64_t>(t.scalar_for_testing));
      pointers.push_back({t.uid, &int64s.back()});
    } else {
      floats.push_back(static_cast<float>(t.scalar_for_testing));
      pointers.push_back({t.uid, &floats.back()});
    }
  }
};

// Bytes of `graph`'s device tensors: what TestBindings allocates without the
// op's tensors, one buffer per tensor.
size_t bindings_bytes(const Graph& graph) {
  size_t bytes = 0;
  for (const TensorSpec& t : graph.tensors()) {
    if (!t.is_virtual && !t.by_value) bytes += span_bytes(t);
  }
  return bytes;
}

// Bytes TestBindings allocates for `graph` without the op's tensors.
size_t scratch_bytes(const Graph& graph, Scratch scratch) {
  if (scratch == Scratch::PerTensor) return bindings_bytes(graph);
  return largest_stand_in(graph, operands_as_is(graph, nullptr));
}

// How much test-binding memory the background builders may hold at once. A timed
// build binds a scratch copy of every tensor of its graph (a batch-512 conv's
// input and output), a restore one buffer (Scratch), each for one candidate's
// trial (Trials); eight builders holding them while the first step's activations
// are live added their scratch to its peak.
// A graph bigger than the budget (a batch-512 layer's) runs when no other holds
// any, so none waits forever. LOOM_CUDNN_TEST_SCRATCH_MIB
// sets it (default 128, below what small models at batch 512 keep alive; what is
// held at the peak still counts in it: resnet20 b512 tf32 held 96 MiB, H200).
class ScratchBudget {
 public:
  void acquire(size_t bytes) {
    std::unique_lock lock(mutex_);
    freed_.wait(lock, [&] { return in_use_ == 0 || in_use_ + bytes <= limit_; });
    in_use_ += bytes;
  }
  size_t limit() const { return limit_; }
  void release(size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      in_use_ -= bytes;
    }
    freed_.notify_all();
  }

 private:
  static size_t limit_from_env() {
    constexpr size_t kMiB = size_t{1} << 20;
    const char* text = std::getenv("LOOM_CUDNN_TEST_SCRATCH_MIB");
    if (text == nullptr) return 128 * kMiB;
    const long long mib = std::atoll(text);
    LOOM_CHECK(mib >= 1, ValueError, "[cudnn] LOOM_CUDNN_TEST_SCRATCH_MIB='{}' must be a whole number >= 1",
               text);
    return static_cast<size_t>(mib) * kMiB;
  }

  const size_t limit_ = limit_from_env();
  std::mutex mutex_;
  std::condition_variable freed_;
  size_t in_use_ = 0;
};

ScratchBudget& background_scratch_budget() {
  static ScratchBudget* budget = new ScratchBudget();  // builders outlive static destruction
  return *budget;
}

// A share of the background budget, held while it lives.
class BudgetShare {
 public:
  explicit BudgetShare(size_t bytes) : bytes_(bytes) { background_scratch_budget().acquire(bytes_); }
  ~BudgetShare() { background_scratch_budget().release(bytes_); }
  BudgetShare(const BudgetShare&) = delete;
  BudgetShare& operator=(const BudgetShare&) = delete;

 private:
  size_t bytes_;
};

// Test-run buffers whose allocation, use and release hold `gate` shared when
// one is given (background builds), so they never overlap a capture; those
// builds also take their buffers' bytes from the background budget first.
// A build on the calling thread binds the op's own tensors (`operands`) where
// it can, so it allocates little beyond each candidate's workspace.
class GatedTests {
 public:
  GatedTests(const Graph& graph, const SelectOptions& options, Scratch scratch) : gate_(options.gate) {
    LOOM_CHECK(gate_ == nullptr || options.operands == nullptr, ValueError,
               "[cudnn] plan selection for {} was given the op's tensors and a capture gate: only a "
               "build on the calling thread (no gate) may test candidates on the op's own tensors",
               graph.pattern());
    if (gate_ != nullptr) budget_.emplace(scratch_bytes(graph, scratch));
    auto held = hold();
    bindings_.emplace(graph, options.operands, scratch);
  }
  ~GatedTests() {
    auto held = hold();
    bindings_.reset();
  }
  GatedTests(const GatedTests&) = delete;
  GatedTests& operator=(const GatedTests&) = delete;

  std::shared_lock<CaptureGate> hold() const {
    return gate_ != nullptr ? std::shared_lock<CaptureGate>(*gate_) : std::shared_lock<CaptureGate>();
  }
  const TestBindings& bindings() const { return *bindings_; }

 private:
  CaptureGate* gate_;
  std::optional<BudgetShare> budget_;  // released after the bindings it covers
  std::optional<TestBindings> bindings_;
};

// Ranked engine configs for one heuristics mode; `problems` collects why a mode gave none.
std::vector<Descriptor> engine_configs(const Descriptor& op_graph, cudnnBackendHeurMode_t mode,
                                       std::vector<std::string>& problems) {
  const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK";
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph)
      .set_enum(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
  if (cudnnStatus_t status = heur.try_finalize(); status != CUDNN_STATUS_SUCCESS) {
    problems.push_back(fmt::format("heuristics {}: {} {}", mode_name, cudnnGetErrorString(status),
                                   last_error_string()));
    return {};
  }
  int64_t count = 0;
  if (cudnnStatus_t status = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
      status != CUDNN_STATUS_SUCCESS) {
    problems.push_back(fmt::format("heuristics {} results: {} {}", mode_name,
                                   cudnnGetErrorString(status), last_error_string()));
    return {};
  }
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raws;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raws.push_back(configs.back().get());
  }
  int64_t returned = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                            raws.data()));
  configs.erase(configs.begin() + std::min(returned, count), configs.end());
  return configs;
}

const char* numerical_note_name(cudnnBackendNumericalNote_t note) {
  switch (note) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE: return "TENSOR_CORE";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: return "DOWN_CONVERT_INPUTS";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: return "REDUCED_PRECISION_REDUCTION";
    case CUDNN_NUMERICAL_NOTE_FFT: return "FFT";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: return "NONDETERMINISTIC";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD: return "WINOGRAD";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4: return "WINOGRAD_TILE_4x4";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6: return "WINOGRAD_TILE_6x6";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13: return "WINOGRAD_TILE_13x13";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP: return "STRICT_NAN_PROP";
    default: return "UNKNOWN";
  }
}

const char* behavior_note_name(cudnnBackendBehaviorNote_t note) {
  switch (note) {
    case CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: return "RUNTIME_COMPILATION";
    case CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: return "CUDA_GRAPH_NATIVE_API";
    case CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY: return "CUBLASLT_DEPENDENCY";
    default: return "OTHER";
  }
}

std::string knob_name(int64_t type) {
  switch (type) {
    case CUDNN_KNOB_TYPE_SWIZZLE: return "SWIZZLE";
    case CUDNN_KNOB_TYPE_TILE_SIZE: return "TILE_SIZE";
    case CUDNN_KNOB_TYPE_EDGE: return "EDGE";
    case CUDNN_KNOB_TYPE_MULTIPLY: return "MULTIPLY";
    case CUDNN_KNOB_TYPE_SPLIT_K_BUF: return "SPLIT_K_BUF";
    case CUDNN_KNOB_TYPE_TILEK: return "TILEK";
    case CUDNN_KNOB_TYPE_STAGES: return "STAGES";
    case CUDNN_KNOB_TYPE_REDUCTION_MODE: return "REDUCTION_MODE";
    case CUDNN_KNOB_TYPE_SPLIT_K_SLC: return "SPLIT_K_SLC";
    case CUDNN_KNOB_TYPE_IDX_MODE: return "IDX_MODE";
    case CUDNN_KNOB_TYPE_SPECFILT: return "SPECFILT";
    case CUDNN_KNOB_TYPE_KERNEL_CFG: return "KERNEL_CFG";
    case CUDNN_KNOB_TYPE_WORKSPACE: return "WORKSPACE";
    case CUDNN_KNOB_TYPE_STREAM_K: return "STREAM_K";
    case CUDNN_KNOB_TYPE_SWAP_AB: return "SWAP_AB";
    case CUDNN_KNOB_TYPE_TILE_CGA_M: return "TILE_CGA_M";
    case CUDNN_KNOB_TYPE_TILE_CGA_N: return "TILE_CGA_N";
    default: return fmt::format("KNOB{}", type);
  }
}

// The config's knob choices, "NAME=VALUE" each: with the engine id they name the kernel.
std::vector<std::string> read_knobs(const Descriptor& config) {
  constexpr int64_t kMaxKnobs = CUDNN_KNOB_TYPE_COUNTS;
  std::vector<Descriptor> choices;
  std::vector<cudnnBackendDescriptor_t> raws;
  for (int64_t i = 0; i < kMaxKnobs; ++i) {
    choices.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    raws.push_back(choices.back().get());
  }
  int64_t n = 0;
  std::vector<std::string> knobs;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxKnobs, &n,
                               raws.data()) != CUDNN_STATUS_SUCCESS) {
    return knobs;
  }
  for (int64_t i = 0; i < std::min(n, kMaxKnobs); ++i) {
    int64_t type = 0, value = 0, count = 0;
    cudnnBackendKnobType_t knob_type{};
    if (cudnnBackendGetAttribute(raws[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                                 &count, &knob_type) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(raws[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1,
                                 &count, &value) != CUDNN_STATUS_SUCCESS) {
      continue;
    }
    type = static_cast<int64_t>(knob_type);
    knobs.push_back(fmt::format("{}={}", knob_name(type), value));
  }
  return knobs;
}

PlanNotes read_notes(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
  PlanNotes notes;
  notes.engine_id = engine.get_int64(CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                               numerical) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) notes.numerical.push_back(numerical_note_name(numerical[i]));
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                               CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                               behavior) == CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < n; ++i) notes.behavior.push_back(behavior_note_name(behavior[i]));
  }
  notes.knobs = read_knobs(config);
  return notes;
}

bool has_note(const PlanNotes& notes, std::string_view note) {
  return std::find(notes.numerical.begin(), notes.numerical.end(), note) != notes.numerical.end();
}

// Engines that compute below fp32 without a note that says so, found by
// comparing every engine with a float64 reference; the strict policy skips them.
struct Erratum {
  NodeKind node;
  int64_t engine_id;
};
// cuDNN 9.19, H100: wgrad engine 17 (knob WORKSPACE=0) has no numerical note
// but was 1.9e-3 of the largest value off on fp32 data (x (12,30,24,6), w
// (49,30,5,5), padding 2), worse than the TF32 engines (3e-4).
constexpr Erratum kStrictErrata[] = {
    {NodeKind::ConvBackwardFilter, 17},
};

bool in_strict_errata(const PlanNotes& notes, const Graph& graph) {
  return std::any_of(std::begin(kStrictErrata), std::end(kStrictErrata), [&](const Erratum& e) {
    return e.engine_id == notes.engine_id && graph.has_node(e.node);
  });
}

// True when a graph's data are 16-bit: already rounded, so the policy
// forbids nothing that rounds inputs.
bool has_16bit_data(const Graph& graph) {
  return std::any_of(graph.tensors().begin(), graph.tensors().end(), [](const TensorSpec& t) {
    return !t.is_virtual && (t.dtype == CUDNN_DATA_BFLOAT16 || t.dtype == CUDNN_DATA_HALF);
  });
}

bool multiplies_matrices(const Graph& graph) {
  return graph.has_node(NodeKind::ConvForward) || graph.has_node(NodeKind::ConvBackwardData) ||
         graph.has_node(NodeKind::ConvBackwardFilter) || graph.has_node(NodeKind::Matmul);
}

// The numerics policy as an engine filter, for fp32 / fp64 data:
// - no policy rounds inputs (DOWN_CONVERT_INPUTS) or reduces in reduced
//   precision, in any graph kind;
// - strict fp32 also takes no tensor cores in graphs with a conv or matmul
//   node (fused or not): elsewhere runtime-fused pointwise, reduction, norm and
//   pooling engines report TENSOR_CORE without using TF32, and forbidding them
//   would leave none;
// - engines in kStrictErrata break the strict policy without a note.
// bf16 / fp16 data allow all of it.
bool allowed(const PlanNotes& notes, const Graph& graph, const SelectOptions& options) {
  if (options.policy.deterministic && has_note(notes, "NONDETERMINISTIC")) return false;
  const Precision precision = options.policy.precision;
  if (precision == Precision::Bf16 || precision == Precision::Fp16 || has_16bit_data(graph)) {
    return true;
  }
  if (has_note(notes, "DOWN_CONVERT_INPUTS") || has_note(notes, "REDUCED_PRECISION_REDUCTION")) {
    return false;
  }
  if (precision != Precision::StrictFp32) return true;
  if (multiplies_matrices(graph) && has_note(notes, "TENSOR_CORE")) return false;
  return !in_strict_errata(notes, graph);
}

// Under strict fp32 a conv or matmul graph's first allowed engine was often
// 2-4x slower than the fastest allowed one (H100, cuDNN 9.19, resnet9's convs:
// fprop 512x512 4x4 3.42 ms against 0.94 ms), and the allowed ones are few (4 to
// 8) and precompiled: time them all and keep the fastest, as autotune does.
bool times_every_candidate(const Graph& graph, const SelectOptions& options) {
  return !options.first_working && options.policy.precision == Precision::StrictFp32 &&
         multiplies_matrices(graph) && !has_16bit_data(graph);
}

// The largest workspace `graph`'s selection takes ahead of the others (plan_memory.h).
size_t workspace_limit(const Graph& graph, const SelectOptions& options) {
  const size_t tensor_bytes = bindings_bytes(graph);
  if (!times_every_candidate(graph, options)) return preferred_workspace_limit(tensor_bytes);
  size_t free_bytes = 0, total_bytes = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return timed_workspace_limit(tensor_bytes, free_bytes);
}

// Whether `cache` holds a kernel compiled for `config`'s engine and knobs: cuDNN
// answers through the element count (1: cached, 0: not), the config going in
// as the single element. The cache's JSON does not tell: its length stayed
// 1959 bytes before and after a compile (H100, cuDNN 9.19).
bool kernel_cached(const Descriptor& cache, const Descriptor& config) {
  cudnnBackendDescriptor_t raw = config.get();
  int64_t cached = 0;
  if (cudnnBackendGetAttribute(cache.get(), CUDNN_ATTR_KERNEL_CACHE_IS_ENGINECFG_KERNEL_CACHED,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cached, &raw) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  return cached == 1;
}

// Finalizes a plan for `config`; null when cuDNN says the config does not
// support the graph. `notes.kernel_reused` is the caller's (it asked the cache first).
std::unique_ptr<Plan> finalize_plan(const std::shared_ptr<const BuiltGraph>& graph, const Descriptor& config,
                                    PlanNotes notes, cudnnHandle_t handle,
                                    const Descriptor* kernel_cache = nullptr) {
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
  if (kernel_cache != nullptr) plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE, *kernel_cache);
  notes.dynamic_shape = graph->graph().dynamic_shape();
  set_handle(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle);
  if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t workspace = plan.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
  return std::make_unique<Plan>(graph, std::move(plan), std::move(notes), workspace);
}

// Runs a candidate once on scratch buffers; false if it fails at execute.
bool test_execute(const Plan& plan, cudnnHandle_t handle, const TestBindings& bindings) {
  ScratchBuffer workspace(static_cast<size_t>(plan.workspace_bytes()), cuda::Purpose::Workspace);
  if (plan.try_execute(handle, bindings.pointers, workspace.get()) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  return cudaStreamSynchronize(cuda::current_stream()) == cudaSuccess;
}

// A candidate's warm-up run more than this many times slower than the fastest
// candidate so far ends its timing: under strict fp32 some engines are 1000x
// slower (1.6 s for one wgrad), and timing them in full was most of a cold start.
constexpr double kHopelessFactor = 4.0;

double time_plan_ms(const Plan& plan, cudnnHandle_t handle, const TestBindings& bindings,
                    double fastest_so_far_ms) {
  ScratchBuffer workspace(static_cast<size_t>(plan.workspace_bytes()), cuda::Purpose::Workspace);
  cuda::EventTimer timer;
  auto timed_run = [&] {
    timer.start();
    plan.execute(handle, bindings.pointers, workspace.get());
    return static_cast<double>(timer.stop_ms());
  };
  constexpr int kRuns = 5;
  std::lock_guard timing(gpu_timing_lock());
  double best = timed_run();  // the warm-up: it can only be slower than a later run
  if (best <= kHopelessFactor * fastest_so_far_ms) {
    // The fastest single run: a background build times while the training
    // thread uses the GPU, and that load can only slow a run down.
    best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < kRuns; ++i) best = std::min(best, timed_run());
  }
  return best;
}

std::vector<Descriptor> all_configs(const BuiltGraph& graph, std::vector<std::string>& problems) {
  std::vector<Descriptor> configs = engine_configs(graph.operation_graph(), CUDNN_HEUR_MODE_A, problems);
  for (Descriptor& d : engine_configs(graph.operation_graph(), CUDNN_HEUR_MODE_FALLBACK, problems)) {
    configs.push_back(std::move(d));
  }
  return configs;
}

}  // namespace

Plan::Plan(std::shared_ptr<const BuiltGraph> graph, Descriptor plan, PlanNotes notes, int64_t workspace_bytes)
    : graph_(std::move(graph)), plan_(std::move(plan)), notes_(std::move(notes)),
      workspace_bytes_(workspace_bytes) {}

cudnnStatus_t Plan::try_execute(cudnnHandle_t handle, const VariantPointers& pointers,
                                void* workspace) const {
  graph_->graph().check_alignment(pointers);  // before cuDNN: a misaligned run is a sticky error
  std::vector<int64_t> uids;
  std::vector<void*> data;
  for (const auto& [uid, ptr] : pointers) {
    uids.push_back(uid);
    data.push_back(const_cast<void*>(ptr));
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(data.size()), data.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  return cudnnBackendExecute(handle, plan_.get(), pack.get());
}

void Plan::execute(cudnnHandle_t handle, const VariantPointers& pointers, void* workspace) const {
  cudnnStatus_t status = try_execute(handle, pointers, workspace);
  if (status != CUDNN_STATUS_SUCCESS) {
    check_status(status, fmt::format("executing the plan for {} (engine {})", graph_->graph().pattern(),
                                     notes_.engine_id).c_str(), __FILE__, __LINE__);
  }
}

std::string Plan::json() const {
  int64_t count = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                            CUDNN_TYPE_CHAR, 0, &count, nullptr));
  std::string text(static_cast<size_t>(count), '\0');
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION,
                                            CUDNN_TYPE_CHAR, count, &count, text.data()));
  text.resize(std::min(text.size(), static_cast<size_t>(count)));
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

bool compiles_at_run_time(const PlanNotes& notes) {
  return std::find(notes.behavior.begin(), notes.behavior.end(), "RUNTIME_COMPILATION") !=
         notes.behavior.end();
}

std::unique_ptr<Plan> restore_plan(const Graph& graph_in, cudnnHandle_t handle, const std::string& json,
                                   PlanNotes notes, const SelectOptions& options, RestoreTimes* times) {
  if (!allowed(notes, graph_in, options)) return nullptr;  // saved before the filter forbade it
  if (options.precompiled_only && compiles_at_run_time(notes)) return nullptr;
  if (selection_is_timed(graph_in, options) && !notes.timed) return nullptr;  // chosen again, timed
  RestoreTimes spent;
  auto lap = [last = std::chrono::steady_clock::now()]() mutable {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    return ms;
  };
  auto graph = std::make_shared<const BuiltGraph>(graph_in, handle);
  spent.graph_ms = lap();
  Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  set_handle(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
           static_cast<int64_t>(json.size()) + 1, json.c_str());
  const bool finalized = plan.try_finalize() == CUDNN_STATUS_SUCCESS;
  spent.finalize_ms = lap();
  if (times != nullptr) *times = spent;
  if (!finalized) return nullptr;
  int64_t workspace = plan.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
  // A file saved before the workspace limit (plan_memory.h) may hold an engine
  // the selection now passes over; selecting again replaces it.
  if (!workspace_preferred(workspace, workspace_limit(graph_in, options))) return nullptr;
  auto restored = std::make_unique<Plan>(graph, std::move(plan), std::move(notes), workspace);
  bool works = false;
  {
    GatedTests tests(graph_in, options, Scratch::Shared);  // only whether it runs
    spent.buffers_ms = lap();
    auto held = tests.hold();
    works = test_execute(*restored, handle, tests.bindings());
    spent.test_ms = lap();
  }
  if (times != nullptr) *times = spent;
  return works ? std::move(restored) : nullptr;
}

bool selection_is_timed(const Graph& graph, const SelectOptions& options) {
  return ((options.policy.autotune || options.timed) && !options.first_working) ||
         times_every_candidate(graph, options);
}

namespace {

// The engine configs of heuristics A and FALLBACK, each with whether its kernel
// is in options.kernel_cache, the cached ones first: a cached config binds its
// kernel in microseconds, while the heuristics' first choice can differ from
// size to size and would compile another one.
std::vector<std::pair<Descriptor, bool>> ordered_configs(const BuiltGraph& graph, const SelectOptions& options,
                                                         std::vector<std::string>& problems) {
  std::vector<std::pair<Descriptor, bool>> configs;
  for (Descriptor& config : all_configs(graph, problems)) {
    const bool cached = options.kernel_cache != nullptr && kernel_cached(*options.kernel_cache, config);
    configs.emplace_back(std::move(config), cached);
  }
  std::stable_partition(configs.begin(), configs.end(), [](const auto& c) { return c.second; });
  return configs;
}

// The test runs of one selection's candidates, and their timing when the
// selection is timed. Each candidate gets its test buffers for its own trial
// only: a background build finalizes its candidates in between (runtime
// compilation, seconds each), and buffers held through that were live beside
// the training step's activations, adding to its peak (resnet20 bf16 batch
// 512: 124 MiB of a 573 MiB peak, H200).
class Trials {
 public:
  Trials(cudnnHandle_t handle, const Graph& graph, const SelectOptions& options, bool timed, size_t most_timed)
      : handle_(handle), graph_(graph), options_(options), timed_(timed), most_timed_(most_timed) {}

  // Tests `plan`, and times it when the selection is timed; true once the
  // selection is decided (an untimed one's first working plan, or the last
  // one the timing takes).
  bool run(std::unique_ptr<Plan> plan, std::vector<std::string>& problems) {
    GatedTests tests(graph_, options_, timed_ ? Scratch::PerTensor : Scratch::Shared);
    bool works = false;
    {
      auto held = tests.hold();
      works = test_execute(*plan, handle_, tests.bindings());
    }
    if (!works) {
      if (++execute_failures_ == 1) problems.push_back("first test run: " + last_error_string());
      return false;
    }
    double ms = 0;
    if (timed_) {
      auto held = tests.hold();
      ms = time_plan_ms(*plan, handle_, tests.bindings(), fastest_ms_);
      fastest_ms_ = std::min(fastest_ms_, ms);
    }
    working_.emplace_back(ms, std::move(plan));
    return !timed_ || working_.size() >= most_timed_;
  }
  bool none_worked() const { return working_.empty(); }
  bool timed() const { return timed_; }
  int timed_count() const { return timed_ ? static_cast<int>(working_.size()) : 0; }
  int execute_failures() const { return execute_failures_; }
  // The working plan (the fastest, when timed); null when none worked.
  std::unique_ptr<Plan> best() {
    if (working_.empty()) return nullptr;
    auto fastest = std::min_element(working_.begin(), working_.end(),
                                    [](const auto& a, const auto& b) { return a.first < b.first; });
    return std::move(fastest->second);
  }

 private:
  cudnnHandle_t handle_;
  const Graph& graph_;
  const SelectOptions& options_;
  bool timed_;
  size_t most_timed_;
  std::vector<std::pair<double, std::unique_ptr<Plan>>> working_;
  double fastest_ms_ = std::numeric_limits<double>::infinity();
  int execute_failures_ = 0;
};

// Why no candidate gave a plan, with the counts of each way one was lost.
std::string why_none(const Selection& selection, const SelectOptions& options, int finalize_failures,
                     int execute_failures, const std::vector<std::string>& problems) {
  return fmt::format(
      "{} engine configs from heuristics A and FALLBACK, {} allowed by the numerics policy ({}{}{}), "
      "{} failed to finalize, {} failed a test run{}{}",
      selection.candidates_seen, selection.candidates_tried, precision_name(options.policy.precision),
      options.policy.deterministic ? ", deterministic" : "",
      options.precompiled_only
          ? fmt::format(", precompiled engines only: {} runtime-compiled passed over",
                        selection.runtime_compiled_skipped)
          : "",
      finalize_failures, execute_failures, problems.empty() ? "" : "; ", fmt::join(problems, "; "));
}

}  // namespace

Selection select_plan(const Graph& graph_in, cudnnHandle_t handle, const SelectOptions& options) {
  auto graph = std::make_shared<const BuiltGraph>(graph_in, handle);
  const bool timed = selection_is_timed(graph_in, options);
  const size_t most_timed = times_every_candidate(graph_in, options)
                                ? SIZE_MAX
                                : static_cast<size_t>(options.autotune_candidates);
  Trials trials(handle, graph_in, options, timed, most_timed);
  const size_t limit = workspace_limit(graph_in, options);
  Selection selection;
  int finalize_failures = 0;
  std::vector<std::string> problems;
  std::vector<std::unique_ptr<Plan>> oversized;  // workspace over the limit: tried only if no other works
  for (const auto& [config, cached] : ordered_configs(*graph, options, problems)) {
    ++selection.candidates_seen;
    PlanNotes notes = read_notes(config);
    notes.kernel_reused = cached;
    notes.timed = trials.timed();
    if (!allowed(notes, graph_in, options)) continue;
    if (options.precompiled_only && compiles_at_run_time(notes)) {
      ++selection.runtime_compiled_skipped;
      continue;
    }
    ++selection.candidates_tried;
    std::unique_ptr<Plan> plan = finalize_plan(graph, config, std::move(notes), handle, options.kernel_cache);
    if (!plan) {
      if (++finalize_failures == 1) problems.push_back("first finalize: " + last_error_string());
      continue;
    }
    if (!workspace_preferred(plan->workspace_bytes(), limit)) {
      oversized.push_back(std::move(plan));
      continue;
    }
    if (trials.run(std::move(plan), problems)) break;
  }
  for (std::unique_ptr<Plan>& plan : oversized) {
    if (!trials.none_worked() || trials.run(std::move(plan), problems)) break;
  }
  selection.candidates_timed = trials.timed_count();
  selection.plan = trials.best();
  if (!selection.plan) {
    selection.why_none = why_none(selection, options, finalize_failures, trials.execute_failures(), problems);
  }
  return selection;
}

std::vector<std::unique_ptr<Plan>> all_working_plans(Graph graph_in, cudnnHandle_t handle) {
  TestBindings bindings(graph_in, nullptr, Scratch::PerTensor);
  auto graph = std::make_shared<const BuiltGraph>(std::move(graph_in), handle);
  std::vector<std::unique_ptr<Plan>> plans;
  std::vector<std::string> problems;
  for (const Descriptor& config : all_configs(*graph, problems)) {
    std::unique_ptr<Plan> plan = finalize_plan(graph, config, read_notes(config), handle);
    if (plan && test_execute(*plan, handle, bindings)) plans.push_back(std::move(plan));
  }
  return plans;
}

}  // namespace loom::cudnn
