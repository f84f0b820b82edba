// File: core/onednn/plan.cc
// See plan.h: memory descriptors, primitive descriptors, the plan cache and
// the execution of a plan with its reorders.
#include "core/onednn/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "core/onednn/library.h"
#include "core/parallel.h"

namespace loom::onednn {
namespace {

const Library& lib() { return *library(); }

constexpr size_t kAlign = 64;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The calling thread's scratch memory: reorder buffers and scratchpads of one
// run at a time, grown to the largest run and kept (runs are sequential per thread).
std::byte* scratch(size_t bytes) {
  struct Buffer {
    std::byte* data = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.size) {
    std::free(buffer.data);
    buffer.data = static_cast<std::byte*>(std::aligned_alloc(kAlign, aligned(bytes)));
    LOOM_CHECK(buffer.data != nullptr, Error,
               "[onednn] could not allocate {} bytes of scratch memory for a oneDNN primitive",
               bytes);
    buffer.size = aligned(bytes);
  }
  return buffer.data;
}

dnnl_memory_desc_t bytes_md(size_t bytes) {
  dnnl_memory_desc_t md;
  const dnnl_dims_t dims = {static_cast<dnnl_dim_t>(bytes)};
  LOOM_DNNL_CHECK(lib().memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a));
  return md;
}

// A memory object over a buffer, destroyed with the run.
struct Memory {
  dnnl_memory_t memory = nullptr;
  Memory(const dnnl_memory_desc_t& md, void* data) {
    LOOM_DNNL_CHECK(lib().memory_create(&memory, &md, lib().engine, data));
  }
  ~Memory() { lib().memory_destroy(memory); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
};

// One operand's memory objects for a run: Loom's buffer, and the buffer in the
// primitive's layout where a reorder goes between them.
struct Bound {
  std::unique_ptr<Memory> user, inner;
};

void* buffer_for(const Plan& plan, int arg, const std::vector<std::pair<int, void*>>& buffers) {
  for (const auto& [a, pointer] : buffers) {
    if (a == arg && pointer != nullptr) return pointer;
  }
  throw OnednnError(fmt::format("[onednn] {}: no buffer for argument {}", plan.impl, arg));
}

void run(const_dnnl_primitive_t primitive, const std::vector<dnnl_exec_arg_t>& args) {
  LOOM_DNNL_CHECK(lib().primitive_execute(primitive, thread_stream(), static_cast<int>(args.size()),
                                          args.data()));
}

void reorder(const_dnnl_primitive_t primitive, dnnl_memory_t from, dnnl_memory_t to) {
  run(primitive, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

Primitive make_reorder(const dnnl_memory_desc_t& from, const dnnl_memory_desc_t& to) {
  dnnl_primitive_desc_t pd = nullptr;
  LOOM_DNNL_CHECK(
      lib().reorder_primitive_desc_create(&pd, &from, lib().engine, &to, lib().engine, nullptr));
  PrimitiveDesc owned(pd);
  dnnl_primitive_t primitive = nullptr;
  LOOM_DNNL_CHECK(lib().primitive_create(&primitive, owned.get()));
  return Primitive(primitive);
}

std::string impl_name(const PrimitiveDesc& pd) {
  const char* name = nullptr;
  const dnnl_status_t status =
      lib().primitive_desc_query(pd.get(), dnnl_query_impl_info_str, 0, &name);
  return status == dnnl_success && name != nullptr ? name : "unknown";
}

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<std::string_view>()(k.kind);
    for (int64_t v : k.ints) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<Key, std::shared_ptr<const Plan>, KeyHash> plans;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::atomic<int64_t>& execution_count() {
  static std::atomic<int64_t> count{0};
  return count;
}

// Where a dense Strided lies in memory: a plain tag for the common layouts.
dnnl_format_tag_t dense_tag(const Strided& t) {
  static constexpr dnnl_format_tag_t kRowMajor[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab,
                                                    dnnl_abc, dnnl_abcd, dnnl_abcde};
  if (t.dim() >= 1 && t.dim() <= 5 && has_layout(t.sizes, t.strides, MemoryFormat::Contiguous)) {
    return kRowMajor[t.dim()];
  }
  if (t.dim() == 4 && has_layout(t.sizes, t.strides, MemoryFormat::ChannelsLast)) return dnnl_acdb;
  return dnnl_format_tag_undef;
}

}  // namespace

std::optional<MemoryFormat> dense_format(const Strided& t) {
  if (has_layout(t.sizes, t.strides, MemoryFormat::Contiguous)) return MemoryFormat::Contiguous;
  if (t.dim() == 4 && has_layout(t.sizes, t.strides, MemoryFormat::ChannelsLast)) {
    return MemoryFormat::ChannelsLast;
  }
  return std::nullopt;
}

void PrimitiveDescDeleter::operator()(dnnl_primitive_desc_t pd) const {
  lib().primitive_desc_destroy(pd);
}
void PrimitiveDeleter::operator()(dnnl_primitive_t p) const { lib().primitive_destroy(p); }
void AttrDeleter::operator()(dnnl_primitive_attr_t a) const { lib().primitive_attr_destroy(a); }

dnnl_memory_desc_t md_of(const Strided& t) {
  const dnnl_format_tag_t tag = dense_tag(t);
  if (tag != dnnl_format_tag_undef) return md_tag(t.sizes, tag);
  dnnl_memory_desc_t md;
  LOOM_DNNL_CHECK(lib().memory_desc_init_by_strides(&md, static_cast<int>(t.dim()), t.sizes.data(),
                                                    dnnl_f32, t.strides.data()));
  return md;
}

dnnl_memory_desc_t md_tag(const Shape& dims, dnnl_format_tag_t tag) {
  dnnl_memory_desc_t md;
  LOOM_DNNL_CHECK(lib().memory_desc_init_by_tag(&md, static_cast<int>(dims.size()), dims.data(),
                                                dnnl_f32, tag));
  return md;
}

dnnl_memory_desc_t md_any(const Shape& dims) { return md_tag(dims, dnnl_format_tag_any); }

Attr make_attr(dnnl_alg_kind_t post_eltwise, bool accumulate) {
  dnnl_primitive_attr_t attr = nullptr;
  LOOM_DNNL_CHECK(lib().primitive_attr_create(&attr));
  Attr owned(attr);
  LOOM_DNNL_CHECK(lib().primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  if (post_eltwise == dnnl_alg_kind_undef && !accumulate) return owned;
  dnnl_post_ops_t ops = nullptr;
  LOOM_DNNL_CHECK(lib().post_ops_create(&ops));
  dnnl_status_t status = accumulate ? lib().post_ops_append_sum(ops, 1.0f) : dnnl_success;
  if (status == dnnl_success && post_eltwise != dnnl_alg_kind_undef) {
    status = lib().post_ops_append_eltwise(ops, 1.0f, post_eltwise, 0.0f, 0.0f);
  }
  if (status == dnnl_success) status = lib().primitive_attr_set_post_ops(attr, ops);
  lib().post_ops_destroy(ops);
  LOOM_DNNL_CHECK(status);
  return owned;
}

bool described(dnnl_status_t init_status) {
  if (init_status == dnnl_invalid_arguments || init_status == dnnl_unimplemented) return false;
  LOOM_DNNL_CHECK(init_status);
  return true;
}

namespace {

// Implementations whose threads meet at a spinning barrier inside the kernel
// (oneDNN's simple_barrier): where another process holds a core, the thread
// that arrives first spins until the descheduled one runs again. Each is
// skipped for the iterator's next implementation, for the primitive kind and
// direction it was measured in (a name such as "jit:avx512_core" is shared by
// the forward and backward-data kernels, which split their work without one).
// - Batch norm at (8, 16, 32, 32) channels-last, 2 threads on 2 cores shared
//   with compilers (load 12): "bnorm_jit" 158 ms wall (16 ms CPU) a call,
//   "bnorm_tbb_jit", the same work split without a barrier, 0.6 ms; single-
//   threaded the two are alike.
// - Convolution weight gradients, whose threads reduce their partial sums
//   behind a barrier: a resnet20 step at batch 8 (load 13) spent 2.1-2.9 s of
//   ONEDNN_VERBOSE time in "jit:avx512_core" backward-weights calls against
//   0.08-0.17 s in "jit:avx2" (its reduction is a second parallel region), in
//   NCHW and channels-last alike; single-threaded "jit:avx2" was no slower.
//   The 1x1 kernel "jit_1x1:avx512_core" reduces the same way: unet's 1x1
//   weight gradient took 95-128 ms a call (load 14) where its forward took
//   0.4; on "jit_1x1:avx2", 22 ms (load 8).
// A thread that waits at the barrier for a descheduled one loses about a
// scheduler time slice, once a call: large calls amortize it, so the
// "jit:avx512_core" weight gradient is skipped only below kSpinAmortizedMacs
// multiply-adds. 3x3 weight gradients at batch 8, channels-last, 2 threads,
// mean of 10 calls at a load of 7.5 on 2 cores, "jit:avx512_core" against
// "jit:avx2": resnet34's four stages (0.92 G multiply-adds each) 113 / 171,
// 92 / 100, 85 / 113, 103 / 156 ms; resnet20's 16 channels at 32x32 (38 M)
// 18.6 / 1.2 ms and 32 at 16x16 (19 M) 11.0 / 0.44 ms. resnet18_cifar's
// (151-302 M, load 3-5): 14.1 / 18.5, 5.9 / 9.3, 7.0 / 15.0, 10.9 / 33.4 ms.
constexpr int64_t kSpinAmortizedMacs = int64_t{1} << 26;

struct SpinningImpl {
  dnnl_primitive_kind_t kind;
  std::optional<dnnl_prop_kind_t> direction;  // every direction when unset
  std::string_view prefix;
  bool amortized_when_large = false;  // kept at kSpinAmortizedMacs and above
};
constexpr SpinningImpl kSpinningImpls[] = {
    {dnnl_batch_normalization, std::nullopt, "bnorm_jit:"},
    {dnnl_convolution, dnnl_backward_weights, "jit:avx512_core", true},
    {dnnl_convolution, dnnl_backward_weights, "jit_1x1:avx512_core"},
};

template <typename T>
T query(const PrimitiveDesc& pd, dnnl_query_t what) {
  T value{};
  LOOM_DNNL_CHECK(lib().primitive_desc_query(pd.get(), what, 0, &value));
  return value;
}

int64_t elements(const dnnl_memory_desc_t& md) {
  int64_t n = 1;
  for (int i = 0; i < md.ndims; ++i) n *= md.dims[i];
  return n;
}

// pd's memory descriptor for argument `arg`, or nullptr where it has none.
const dnnl_memory_desc_t* arg_md(const PrimitiveDesc& pd, int arg) {
  const dnnl_memory_desc_t* md = lib().primitive_desc_query_md(pd.get(), dnnl_query_exec_arg_md, arg);
  return md != nullptr && md->ndims > 0 ? md : nullptr;
}

// The weights, or their gradient (a grouped convolution's are 5-D: G, K/G, C/G, R, S).
const dnnl_memory_desc_t* weights_md(const PrimitiveDesc& pd) {
  const dnnl_memory_desc_t* w = arg_md(pd, DNNL_ARG_WEIGHTS);
  return w != nullptr ? w : arg_md(pd, DNNL_ARG_DIFF_WEIGHTS);
}

// A convolution's or matrix product's multiply-adds, in any direction: each
// output or output-gradient element takes one row of the weights (a
// convolution's C/G * R * S: every weight once per output pixel of every
// image; a product's inner dimension); nothing for other kinds.
std::optional<int64_t> multiply_adds(const PrimitiveDesc& pd, dnnl_primitive_kind_t kind) {
  const dnnl_memory_desc_t* y = arg_md(pd, DNNL_ARG_DST);
  if (y == nullptr) y = arg_md(pd, DNNL_ARG_DIFF_DST);
  if (y == nullptr) return std::nullopt;
  if (kind == dnnl_matmul) {
    const dnnl_memory_desc_t* x = arg_md(pd, DNNL_ARG_SRC);
    return x == nullptr ? std::nullopt : std::optional<int64_t>(elements(*y) * x->dims[x->ndims - 1]);
  }
  if (kind != dnnl_convolution && kind != dnnl_inner_product) return std::nullopt;
  const dnnl_memory_desc_t* w = weights_md(pd);
  if (w == nullptr) return std::nullopt;
  return elements(*y) * (elements(*w) / y->dims[1]);
}

bool spins(const PrimitiveDesc& pd, std::string_view impl) {
  for (const SpinningImpl& s : kSpinningImpls) {
    if (impl.substr(0, s.prefix.size()) != s.prefix) continue;
    if (query<dnnl_primitive_kind_t>(pd, dnnl_query_primitive_kind) != s.kind) continue;
    if (s.direction && query<dnnl_prop_kind_t>(pd, dnnl_query_prop_kind) != *s.direction) continue;
    if (!s.amortized_when_large) return true;
    const std::optional<int64_t> macs = multiply_adds(pd, s.kind);
    LOOM_CHECK(macs.has_value(), OnednnError, "[onednn] a convolution weight gradient without its dy or dw");
    return *macs < kSpinAmortizedMacs;
  }
  return false;
}

// Below this many elements, a memory-bound step (a reorder, batch norm, an
// activation, pooling, softmax) runs on the calling thread alone. Under
// OMP_WAIT_POLICY=PASSIVE (core/parallel.cc) the pool's other threads sleep
// between regions, and waking them cost more than they saved: mobilenet_v2_cifar
// at batch 8, channels-last, ONEDNN_VERBOSE per call on 2 threads against 1
// (load 1.6-1.8): batch norm forward on (8, 64, 8, 8) 189 / 15 us, (8, 384, 8, 8)
// 256 / 132, (8, 192, 16, 16) 330 / 264, but (8, 144, 32, 32) 673 / 802; the
// reorder of a 384x1x3x3 depthwise filter 61 / 2.7 us, of a 384x64 one 67 / 19.
// Convolutions and matrix products keep the pool down to kSerialMacs: they are
// compute-bound, and 1 thread was 1.3-1.7x slower on those shapes.
constexpr int64_t kSerialElements = int64_t{1} << 19;

bool memory_bound(dnnl_primitive_kind_t kind) {
  switch (kind) {
    case dnnl_reorder:
    case dnnl_batch_normalization:
    case dnnl_eltwise:
    case dnnl_pooling_v2:
    case dnnl_softmax_v2: return true;
    default: return false;
  }
}

// Whether a step of `kind` whose largest operand has `largest` elements runs
// on the calling thread alone.
bool runs_serial(dnnl_primitive_kind_t kind, int64_t largest) {
  return memory_bound(kind) && largest < kSerialElements;
}

// The OpenMP team of the calling thread for a step: itself alone, or the pool.
void bind_team(bool serial) {
  if (serial) {
    bind_openmp_threads(1);
  } else {
    bind_openmp_to_pool();
  }
}

struct IteratorDeleter {
  void operator()(dnnl_primitive_desc_iterator_t it) const { lib().primitive_desc_iterator_destroy(it); }
};

// oneDNN's first implementation of op_desc, for the calling thread's team,
// that does not spin at a barrier: see make_primitive_desc.
PrimitiveDesc first_fast(const void* op_desc, const Attr& attr, const_dnnl_primitive_desc_t hint,
                         std::string_view preferred) {
  dnnl_primitive_desc_iterator_t it = nullptr;
  const dnnl_status_t status = lib().primitive_desc_iterator_create(
      &it, static_cast<const_dnnl_op_desc_t>(op_desc), attr.get(), lib().engine, hint);
  if (status == dnnl_unimplemented) return nullptr;
  LOOM_DNNL_CHECK(status);
  const std::unique_ptr<dnnl_primitive_desc_iterator, IteratorDeleter> owned_it(it);
  // oneDNN lists the implementations best first, its reference ones last.
  PrimitiveDesc first;
  do {
    PrimitiveDesc pd(lib().primitive_desc_iterator_fetch(it));
    LOOM_CHECK(pd != nullptr, OnednnError, "[onednn] dnnl_primitive_desc_iterator_fetch returned null");
    const std::string name = impl_name(pd);
    if (name.rfind("ref", 0) == 0) break;
    if (spins(pd, name)) continue;
    if (preferred.empty() || name.find(preferred) != std::string::npos) return pd;
    if (!first) first = std::move(pd);
  } while (lib().primitive_desc_iterator_next(it) == dnnl_success);
  return first;
}

// Below this many multiply-adds a convolution or matrix product runs on the
// calling thread alone too: waking the pool's sleeping threads costs 40-55 us
// a call, more than half of such a step. vit_tiny at batch 8, DNNL_VERBOSE
// medians on 2 threads against 1 (2 cores): matmul 136x64 @ 64x192 (1.7 M)
// 76 / 38 us, 136x64 @ 64x64 58 / 12, the attention's 8x4 batched 17x16 @
// 16x17 57 / 11, the 7x7 patch convolution 71 / 15; the whole step 9.6 / 5.8
// ms. At 2^22 one thread takes about 95 us (44 G multiply-adds a second), as
// long as two take with the wake-up.
constexpr int64_t kSerialMacs = int64_t{1} << 22;

// Whether pd's primitive runs on the calling thread alone: memory-bound, its
// data (source or destination, or their gradients) below kSerialElements, or
// a dense convolution or matrix product below kSerialMacs.
bool serial_pd(const PrimitiveDesc& pd) {
  int64_t largest = 0;
  for (int arg : {DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_DST}) {
    if (const dnnl_memory_desc_t* md = arg_md(pd, arg)) largest = std::max(largest, elements(*md));
  }
  const auto kind = query<dnnl_primitive_kind_t>(pd, dnnl_query_primitive_kind);
  if (runs_serial(kind, largest)) return true;
  // A grouped convolution keeps the pool: a depthwise one is memory-bound and
  // its few multiply-adds say little (mobilenet_v2_cifar's 576 channels at
  // 8x8, stride 2, data gradient: 227 us on 2 threads, 453 on 1).
  const dnnl_memory_desc_t* w = weights_md(pd);
  if (kind == dnnl_convolution && w != nullptr && w->ndims == 5) return false;
  const std::optional<int64_t> macs = multiply_adds(pd, kind);
  return macs && *macs < kSerialMacs;
}

}  // namespace

PrimitiveDesc make_primitive_desc(const void* op_desc, const Attr& attr,
                                  const_dnnl_primitive_desc_t hint, std::string_view preferred) {
  bind_openmp_to_pool();  // implementations split their work by the thread count
  PrimitiveDesc pd = first_fast(op_desc, attr, hint, preferred);
  if (!pd || !serial_pd(pd)) return pd;
  // Some implementations (bnorm_tbb_jit) fix their team when created: a serial
  // step's is created for a team of one.
  bind_openmp_threads(1);
  pd = first_fast(op_desc, attr, hint, preferred);
  bind_openmp_to_pool();
  return pd;
}

std::shared_ptr<Plan> make_plan(const PrimitiveDesc& pd, const std::vector<UserOperand>& operands) {
  auto plan = std::make_shared<Plan>();
  plan->serial = serial_pd(pd);
  bind_team(plan->serial);  // created for the team it runs on, as make_primitive_desc chose it
  dnnl_primitive_t primitive = nullptr;
  LOOM_DNNL_CHECK(lib().primitive_create(&primitive, pd.get()));
  bind_openmp_to_pool();
  plan->primitive.reset(primitive);
  plan->impl = impl_name(pd);
  const dnnl_memory_desc_t* scratchpad = lib().primitive_desc_query_md(pd.get(), dnnl_query_scratchpad_md, 0);
  plan->scratchpad_bytes = scratchpad == nullptr ? 0 : lib().memory_desc_get_size(scratchpad);
  for (const UserOperand& u : operands) {
    PlanOperand o;
    o.arg = u.arg;
    o.output = u.output;
    o.user = u.user;
    const dnnl_memory_desc_t* inner = lib().primitive_desc_query_md(pd.get(), dnnl_query_exec_arg_md, u.arg);
    LOOM_CHECK(inner != nullptr, OnednnError, "[onednn] {} takes no argument {}", plan->impl, u.arg);
    o.inner = *inner;
    if (o.user.ndims == 0) o.user = o.inner;
    if (!lib().memory_desc_equal(&o.user, &o.inner)) {
      o.reorder = u.output ? make_reorder(o.inner, o.user) : make_reorder(o.user, o.inner);
      o.inner_bytes = lib().memory_desc_get_size(&o.inner);
      o.serial_reorder = runs_serial(dnnl_reorder, elements(o.user));
    }
    plan->operands.push_back(std::move(o));
  }
  return plan;
}

size_t Plan::bytes(int arg) const {
  for (const PlanOperand& o : operands) {
    if (o.arg == arg) return lib().memory_desc_get_size(&o.user);
  }
  return 0;
}

std::shared_ptr<const Plan> cached_plan(Key key, const std::function<std::shared_ptr<Plan>()>& build) {
  key.ints.push_back(num_threads());
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto found = c.plans.find(key);
    if (found != c.plans.end()) return found->second;
  }
  std::shared_ptr<const Plan> plan = build();  // outside the lock: building takes milliseconds
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.plans.emplace(std::move(key), std::move(plan)).first->second;
}

void execute(const Plan& plan, const std::vector<std::pair<int, void*>>& buffers) {
  ++execution_count();
  size_t total = aligned(plan.scratchpad_bytes);
  for (const PlanOperand& o : plan.operands) total += aligned(o.inner_bytes);
  std::byte* next = scratch(total);
  std::vector<dnnl_exec_arg_t> args;
  std::unique_ptr<Memory> scratchpad;
  if (plan.scratchpad_bytes > 0) {
    scratchpad = std::make_unique<Memory>(bytes_md(plan.scratchpad_bytes), next);
    args.push_back({DNNL_ARG_SCRATCHPAD, scratchpad->memory});
    next += aligned(plan.scratchpad_bytes);
  }
  std::vector<Bound> bound(plan.operands.size());
  for (size_t i = 0; i < plan.operands.size(); ++i) {
    const PlanOperand& o = plan.operands[i];
    bound[i].user = std::make_unique<Memory>(o.user, buffer_for(plan, o.arg, buffers));
    if (o.reorder) {
      bound[i].inner = std::make_unique<Memory>(o.inner, next);
      next += aligned(o.inner_bytes);
      if (!o.output) {
        bind_team(o.serial_reorder);
        reorder(o.reorder.get(), bound[i].user->memory, bound[i].inner->memory);
      }
    }
    args.push_back({o.arg, (o.reorder ? bound[i].inner : bound[i].user)->memory});
  }
  bind_team(plan.serial);
  run(plan.primitive.get(), args);
  for (size_t i = 0; i < plan.operands.size(); ++i) {
    const PlanOperand& o = plan.operands[i];
    if (o.reorder && o.output) {
      bind_team(o.serial_reorder);
      reorder(o.reorder.get(), bound[i].inner->memory, bound[i].user->memory);
    }
  }
}

std::vector<std::string> plan_lines() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<std::string> lines;
  for (const auto& [key, plan] : c.plans) {
    int reorders = 0;
    if (plan) {
      for (const PlanOperand& o : plan->operands) reorders += o.reorder ? 1 : 0;
    }
    lines.push_back(fmt::format("{} ({}): {}{}{}", key.kind, fmt::join(key.ints, ", "),
                                plan ? plan->impl : "reference kernels",
                                reorders > 0 ? fmt::format(", {} reorders", reorders) : "",
                                plan && plan->serial ? ", on the calling thread" : ""));
  }
  return lines;
}

int64_t executions() { return execution_count().load(); }

void clear_plans() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.plans.clear();
}

}  // namespace loom::onednn
