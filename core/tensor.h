// File: core/tensor.h
// Tensor: a handle to (storage, offset, sizes, strides, dtype, autograd meta).
// Copying a Tensor copies the handle; views share storage. Logical dims of an
// image batch are always N, C, H, W; channels-last lives only in the strides.
//
//   auto x = loom::randn({8, 3, 32, 32}, {.dtype = loom::DType::Float64});
//   auto y = x.contiguous(loom::MemoryFormat::ChannelsLast);  // same values, NHWC memory
//   std::cout << y.slice(0, 0, 2) << "\n";
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/strided.h"

namespace loom {

class Node;
class Generator;
struct TensorImpl;

struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  MemoryFormat memory_format = MemoryFormat::Contiguous;
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage; most calls on it throw
  explicit Tensor(std::shared_ptr<TensorImpl> impl);

  bool defined() const { return impl_ != nullptr; }

  // --- metadata -----------------------------------------------------------
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t dim) const;    // dim may be negative
  int64_t stride(int64_t dim) const;  // dim may be negative
  int64_t dim() const;
  int64_t numel() const;
  int64_t storage_offset() const;
  DType dtype() const;
  Device device() const;
  TensorOptions options() const;  // dtype and device (memory format: contiguous)
  bool is_contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;
  // ChannelsLast for 4-D tensors that are not NCHW-contiguous and whose strides
  // are NHWC, or ordered as NHWC's (a strided view of a channels-last tensor,
  // such as x.slice(2, 0, h, 2)): what is computed from it keeps its layout.
  MemoryFormat suggest_memory_format() const;
  const std::shared_ptr<Storage>& storage() const;
  void* raw_data() const;  // first element (storage + offset)
  template <class T>
  T* data_ptr() const;  // checks that T matches dtype()
  Strided strided() const;

  // --- element access (copies from the GPU when needed) ----------------------
  double item() const;  // a one-element tensor's value
  double at(const Shape& index) const;
  void set(const Shape& index, double value);  // in place
  template <class T>
  std::vector<T> to_vector() const;  // row-major values, converted to T

  // --- reductions as methods, as libtorch's (pred == y).sum() -----------------
  // The same as loom::sum / mean / argmax (core/ops/reduction.h); they are
  // defined with the ops, so a program that calls them links //core/ops.
  Tensor sum() const;
  Tensor mean() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;

  // --- views: share storage ---------------------------------------------------
  Tensor view(Shape sizes) const;     // one size may be -1; strides must allow it
  Tensor reshape(Shape sizes) const;  // a view where possible, else a copy
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor expand(const Shape& sizes) const;          // -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // --- copies -----------------------------------------------------------------
  Tensor contiguous(MemoryFormat format = MemoryFormat::Contiguous) const;  // self if already
  Tensor clone(MemoryFormat format = MemoryFormat::Preserve) const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  // x tiled repeats[i] times along dim i, as torch.Tensor.repeat: loom::repeat
  // (core/ops/shape_ops.h), defined with the ops, so a program that calls it links //core/ops.
  Tensor repeat(const Shape& repeats) const;

  // --- in place (forbidden on tensors that require grad while grad mode is on) --
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);  // src broadcast to this shape; dtype cast; any device
  // Values drawn uniformly from [low, high): rand's draws, scaled and shifted in
  // the dtype's arithmetic, so the same as rand(...) * (high - low) + low.
  Tensor& uniform_(double low = 0.0, double high = 1.0, Generator* generator = nullptr);

  // --- autograd ---------------------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only
  bool is_leaf() const;
  const Tensor& grad() const;  // undefined until a backward reaches this leaf
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const;
  // Backpropagates from this tensor. `gradient` may be omitted for a one-element
  // tensor. The graph's saved tensors are freed unless retain_graph is true.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no history

  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // This handle is the only one to its tensor and no other tensor views its
  // storage: autograd may then keep it as a leaf's gradient instead of a copy.
  bool sole_owner() const { return impl_.use_count() == 1 && storage().use_count() == 1; }
  TensorImpl* impl() const { return impl_.get(); }
  // For observers that must not keep the tensor alive (trace::Recorder's stand-ins).
  std::weak_ptr<TensorImpl> weak_impl() const { return impl_; }

 private:
  const TensorImpl& checked() const;
  Tensor make_view(Shape sizes, Shape strides, int64_t offset) const;
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;
  Shape sizes;
  Shape strides;
  DType dtype = DType::Float32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;           // null for leaves
  Tensor grad;                             // leaves only
  std::weak_ptr<Node> grad_accumulator;    // leaves only, made on first use
  // Leaves only: called with the leaf after a backward has written its .grad
  // (core/autograd.h, register_post_accumulate_grad_hook), by handle.
  std::vector<std::pair<int64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
};

// --- factories ------------------------------------------------------------------
Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
Tensor full(const Shape& sizes, double value, TensorOptions options = {});
// Same sizes, dtype, device and layout as `like` (dense); options' dtype is ignored.
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
// start, start+step, ... < end, in options.dtype: float32 unless asked otherwise, also for
// arange(n) (torch.arange gives int64 for integer arguments; pass {.dtype = DType::Int64}).
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {});
// The n x m identity matrix (ones on the main diagonal), as torch.eye: any
// dtype, made on options.device; n, m >= 0.
//   Tensor identity = eye(3);  // (3, 3); eye(2, 4) is (2, 4)
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});
Tensor eye(int64_t n, TensorOptions options = {});
// `steps` evenly spaced values from start to end, both included, as
// torch.linspace, with its values: the first half counts up from start, the
// second down from end, so the last element is end exactly; steps == 1 gives
// {start}. Floating or integer dtypes (integers truncate, as PyTorch's).
//   Tensor grid = linspace(-1.0, 1.0, 5);  // -1, -0.5, 0, 0.5, 1
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// Uniform in [0, 1), standard normal, integers in [low, high). A null generator
// means the default one (seed it with manual_seed).
Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& sizes,
               TensorOptions options = {.dtype = DType::Int64}, Generator* generator = nullptr);
// rand and randn with like's sizes, dtype, device and layout (torch.rand_like):
// the noise of a VAE's reparameterization, eps = randn_like(std). On a GPU,
// every random factory (and uniform_) draws there, so a captured training step
// draws fresh numbers at each replay.
Tensor rand_like(const Tensor& like, Generator* generator = nullptr);
Tensor randn_like(const Tensor& like, Generator* generator = nullptr);
// Copies `numel(sizes)` row-major elements of type `src_dtype` from host memory.
Tensor from_host(const void* data, DType src_dtype, const Shape& sizes, TensorOptions options);
// Values converted to options.dtype: tensor({1, 2, 3, 4}, {2, 2}).
Tensor tensor(const std::vector<double>& values, const Shape& sizes, TensorOptions options = {});

// t.to(dtype) for every tensor, each in its own layout and detached (no
// autograd): what a batch of conversions costs in one go. Dense floating CUDA
// tensors of one device and source dtype convert in one kernel launch (per 64).
std::vector<Tensor> to_all(const std::vector<Tensor>& tensors, DType dtype);

// dst[i].copy_(src[i]) for every i (the same sizes; no broadcast): pairs dense
// in one layout, of one dtype and on one CUDA device move in one kernel launch
// (per 64), as a training step's inputs into its captured graph's buffers. The
// pairs run as if at once: no destination may overlap another pair's tensors.
void copy_all(const std::vector<Tensor>& dst, const std::vector<Tensor>& src);

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// normalize_dim for ops that index a dim: throws IndexError on 0-d tensors,
// which have none (reductions, by contrast, accept dim 0 / -1 of a 0-d tensor).
int64_t checked_dim(const Tensor& t, int64_t dim, std::string_view op);

// --- template definitions -----------------------------------------------------------
void check_dtype_access(const Tensor& tensor, DType requested);

template <class T>
T* Tensor::data_ptr() const {
  check_dtype_access(*this, dtype_of<T>());
  return static_cast<T*>(raw_data());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* data = host.data_ptr<T>();
  return std::vector<T>(data, data + host.numel());
}

}  // namespace loom
