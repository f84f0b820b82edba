// File: core/tensor.cc
// Tensor: the handle's accessors, element access, copies, device and dtype moves, autograd state.
#include "core/tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <utility>

#include "core/autograd.h"
#include "core/cpu/copy.h"
#include "core/error.h"
#include "core/trace.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace loom {

Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

const TensorImpl& Tensor::checked() const {
  LOOM_CHECK(impl_ != nullptr, ValueError,
             "[tensor] this tensor is undefined (default-constructed or a missing optional "
             "argument); create it with a factory such as loom::zeros");
  return *impl_;
}

// --- metadata ------------------------------------------------------------------

int64_t checked_dim(const Tensor& t, int64_t dim, std::string_view op) {
  LOOM_CHECK(t.dim() > 0, IndexError, "[{}] a 0-d tensor has no dim {} (it holds one value; use item())",
             op, dim);
  return normalize_dim(dim, t.dim(), op);
}

const Shape& Tensor::sizes() const { return checked().sizes; }
const Shape& Tensor::strides() const { return checked().strides; }
int64_t Tensor::size(int64_t dim) const { return sizes()[checked_dim(*this, dim, "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[checked_dim(*this, dim, "stride")]; }
int64_t Tensor::dim() const { return static_cast<int64_t>(sizes().size()); }
int64_t Tensor::numel() const { return numel_of(sizes()); }
int64_t Tensor::storage_offset() const { return checked().offset; }
DType Tensor::dtype() const { return checked().dtype; }
Device Tensor::device() const { return checked().storage->device(); }
TensorOptions Tensor::options() const { return {.dtype = dtype(), .device = device()}; }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked().storage; }

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Preserve) format = MemoryFormat::Contiguous;
  return has_layout(sizes(), strides(), format);
}

namespace {

// Whether the strides order a 4-D tensor's dims as NHWC memory does, dense or
// not: C innermost, then W, H and N, each dim's stride at least the extent of
// the dims inside it. Ambiguous strides order nothing: broadcast channels, and
// C, H and W all of one element at one stride (an (N, 1, 1, 1) slice).
bool channels_last_order(const Shape& sizes, const Shape& strides) {
  if (strides[1] == 0) return false;
  int64_t inner = 0;  // the extent of the dims walked so far
  for (size_t d : {1, 3, 2, 0}) {
    if (sizes[d] == 0 || strides[d] < inner) return false;
    if (d == 0 && inner == strides[1]) return false;
    inner = sizes[d] > 1 ? strides[d] * sizes[d] : strides[d];
  }
  return true;
}

}  // namespace

MemoryFormat Tensor::suggest_memory_format() const {
  if (dim() != 4 || is_contiguous()) return MemoryFormat::Contiguous;
  return is_contiguous(MemoryFormat::ChannelsLast) || channels_last_order(sizes(), strides())
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

void* Tensor::raw_data() const {
  const TensorImpl& impl = checked();
  auto* base = static_cast<char*>(impl.storage->data());
  if (base == nullptr) {
    // Only fusion by tracing makes non-empty tensors without data (core/ops/fusion_trace.h).
    LOOM_CHECK(numel_of(impl.sizes) == 0, ValueError,
               "[tensor] this {} tensor has no data: it stands for the middle of a chain that fusion "
               "by tracing runs as one block, which only the chain's next op may take. The forward "
               "used it elsewhere, so it no longer matches its trace: trace it again, or run it "
               "with loom::FusionGuard(false)",
               shape_str(impl.sizes));
    return nullptr;
  }
  return base + impl.offset * element_size(impl.dtype);
}

Strided Tensor::strided() const { return {raw_data(), dtype(), sizes(), strides()}; }

void check_dtype_access(const Tensor& tensor, DType requested) {
  LOOM_CHECK(tensor.dtype() == requested, TypeError,
             "[data_ptr] tensor has dtype {} but its data was requested as {}; convert first "
             "with .to(DType)",
             dtype_name(tensor.dtype()), dtype_name(requested));
}

// --- element access ----------------------------------------------------------------

namespace {

int64_t element_offset(const Tensor& t, const Shape& index) {
  LOOM_CHECK(static_cast<int64_t>(index.size()) == t.dim(), IndexError,
             "[at] index {} has {} entries but the tensor of shape {} has {} dims",
             shape_str(index), index.size(), shape_str(t.sizes()), t.dim());
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    int64_t i = index[d] < 0 ? index[d] + t.sizes()[d] : index[d];
    LOOM_CHECK(i >= 0 && i < t.sizes()[d], IndexError,
               "[at] index {} is out of bounds for shape {} (dim {} has size {})",
               shape_str(index), shape_str(t.sizes()), d, t.sizes()[d]);
    offset += i * t.strides()[d];
  }
  return offset;
}

// A one-element Strided view at `offset` elements past the tensor's first one.
Strided element_view(const Tensor& t, int64_t offset) {
  auto* base = static_cast<char*>(t.raw_data()) + offset * element_size(t.dtype());
  return {base, t.dtype(), {}, {}};
}

}  // namespace

double Tensor::item() const {
  LOOM_CHECK(numel() == 1, ValueError,
             "[item] needs a tensor with one element, got shape {} ({} elements)",
             shape_str(sizes()), numel());
  return at(Shape(dim(), 0));
}

double Tensor::at(const Shape& index) const {
  Strided element = element_view(*this, element_offset(*this, index));
  return visit_dtype(dtype(), [&]<class T>() {
#ifdef LOOM_WITH_CUDA
    if (device().is_cuda()) {
      DeviceGuard guard(device());
      T value;
      cuda::copy_to_host(&value, element.data, sizeof(T));
      return to_double(value);
    }
#endif
    return to_double(*element.ptr<T>());
  });
}

void Tensor::set(const Shape& index, double value) {
  Strided element = element_view(*this, element_offset(*this, index));  // a bad index writes nothing
  check_inplace(*this, "set");
  visit_dtype(dtype(), [&]<class T>() {
    T converted = from_double<T>(value);
    if (device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
      DeviceGuard guard(device());
      cuda::copy_to_device(element.data, &converted, sizeof(T));
#endif
    } else {
      *element.ptr<T>() = converted;
    }
  });
}

// --- copies ----------------------------------------------------------------------

namespace {

Tensor empty_with_layout(const Tensor& like, MemoryFormat format, DType dtype, Device device) {
  if (format == MemoryFormat::Preserve) format = like.suggest_memory_format();
  return empty(like.sizes(), {.dtype = dtype, .device = device, .memory_format = format});
}

#ifdef LOOM_WITH_CUDA
size_t nbytes_of(const Tensor& t) { return t.numel() * element_size(t.dtype()); }

// Host <-> device copies move one dense block; strides and casts are handled on
// whichever side has them. The GPU side's device is current.
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  DeviceGuard guard(src.device().is_cuda() ? src.device() : dst.device());
  if (src.device().is_cuda()) {
    Tensor dense = src.contiguous();
    Tensor host = empty(src.sizes(), {.dtype = src.dtype()});
    cuda::copy_to_host(host.raw_data(), dense.raw_data(), nbytes_of(host));
    cpu::copy(dst.strided(), host.strided());
    return;
  }
  Tensor host = src.to(dst.dtype()).contiguous();
  if (dst.is_contiguous()) {
    cuda::copy_to_device(dst.raw_data(), host.raw_data(), nbytes_of(host));
    return;
  }
  Tensor staged = empty(src.sizes(), dst.options());
  cuda::copy_to_device(staged.raw_data(), host.raw_data(), nbytes_of(host));
  cuda::copy(dst.strided(), staged.strided());
}

// GPU -> another GPU: one dense block in src's dtype moves between the devices
// (peer to peer where they can, else staged by the driver); layout and dtype
// are matched on dst's device.
void copy_between_gpus(const Tensor& dst, const Tensor& src) {
  Tensor dense;
  {
    DeviceGuard guard(src.device());
    dense = src.contiguous();
  }
  const bool direct = dst.dtype() == src.dtype() && dst.is_contiguous();
  Tensor landed = direct ? dst : empty(src.sizes(), {.dtype = src.dtype(), .device = dst.device()});
  cuda::copy_between_devices(landed.raw_data(), dst.device().index, dense.raw_data(),
                             src.device().index, nbytes_of(dense));
  if (direct) return;
  DeviceGuard guard(dst.device());
  cuda::copy(dst.strided(), landed.strided());
}
#endif

// dst = src elementwise; same sizes; any devices, dtypes and strides.
void copy_values(const Tensor& dst, const Tensor& src_in) {
  NoGradGuard no_grad;
  Tensor src = src_in.detach();
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    cpu::copy(dst.strided(), src.strided());
    return;
  }
#ifdef LOOM_WITH_CUDA
  if (dst.device() == src.device()) {
    DeviceGuard guard(dst.device());
    cuda::copy(dst.strided(), src.strided());
    return;
  }
  if (dst.device().is_cuda() && src.device().is_cuda()) {
    copy_between_gpus(dst, src);
    return;
  }
  copy_across_devices(dst, src);
#endif
}

std::vector<Tensor> pass_through(const Tensor& dy) { return {dy}; }

}  // namespace

Tensor Tensor::contiguous(MemoryFormat format) const {
  return is_contiguous(format) ? *this : clone(format);
}

Tensor Tensor::clone(MemoryFormat format) const {
  trace::OpScope trace("clone");
  Tensor out = empty_with_layout(*this, format, dtype(), device());
  copy_values(out, *this);
  if (needs_grad({*this})) record("clone", {*this}, out, pass_through);
  if (trace.recording()) trace.record({*this}, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  trace::OpScope trace("to_device");
  Tensor out = empty_with_layout(*this, MemoryFormat::Preserve, dtype(), target);
  copy_values(out, *this);
  Device source = device();
  if (needs_grad({*this})) {
    record("to_device", {*this}, out, [source](const Tensor& dy) {
      return std::vector<Tensor>{dy.to(source)};
    });
  }
  if (trace.recording()) trace.record({*this}, out, {{"device", target.str()}});
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  trace::OpScope trace("to_dtype");
  Tensor out = empty_with_layout(*this, MemoryFormat::Preserve, target, device());
  copy_values(out, *this);
  if (is_floating(target) && needs_grad({*this})) record_cast(*this, out);
  if (trace.recording()) trace.record({*this}, out, {{"dtype", std::string(dtype_name(target))}});
  return out;
}

namespace {

#ifdef LOOM_WITH_CUDA
// Whether src and dst can be walked as one flat array each, in one order: both
// on the GPU and dense in src's layout. Their strides may still differ where a
// size is 1 (a one-channel weight's gradient, NHWC strides, next to an NCHW result).
bool dense_alike(const Tensor& src, const Tensor& dst) {
  const MemoryFormat format = src.suggest_memory_format();
  return src.device().is_cuda() && dst.device() == src.device() && dst.sizes() == src.sizes() &&
         src.is_contiguous(format) && dst.is_contiguous(format);
}

// Whether the conversion src -> dst runs as one span.
bool converts_as_span(const Tensor& src, const Tensor& dst) {
  return is_floating(src.dtype()) && is_floating(dst.dtype()) && dense_alike(src, dst);
}

// Whether dst.copy_(src) can move the bytes as one span.
bool copies_as_span(const Tensor& dst, const Tensor& src) {
  return dst.dtype() == src.dtype() && dense_alike(src, dst);
}
#endif

}  // namespace

std::vector<Tensor> to_all(const std::vector<Tensor>& tensors, DType dtype) {
  NoGradGuard no_grad;
  std::vector<Tensor> out(tensors.size());
#ifdef LOOM_WITH_CUDA
  // (device index, source dtype) -> its spans
  std::map<std::pair<int, DType>, std::vector<cuda::DenseSpan>> batches;
#endif
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dtype() == dtype) {
      out[i] = t.detach();
      continue;
    }
    out[i] = empty_with_layout(t, MemoryFormat::Preserve, dtype, t.device());
#ifdef LOOM_WITH_CUDA
    if (converts_as_span(t, out[i])) {
      batches[{t.device().index, t.dtype()}].push_back(
          {t.raw_data(), out[i].raw_data(), t.numel()});
      continue;
    }
#endif
    copy_values(out[i], t);
  }
#ifdef LOOM_WITH_CUDA
  for (const auto& [where, spans] : batches) {
    DeviceGuard guard(Device::cuda(where.first));
    cuda::convert_spans(spans, dtype, where.second);
  }
#endif
  return out;
}

void copy_all(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  LOOM_CHECK(dst.size() == src.size(), ValueError,
             "[copy_all] takes one source per destination, got {} destinations and {} sources",
             dst.size(), src.size());
#ifdef LOOM_WITH_CUDA
  std::map<int, std::vector<cuda::DenseSpan>> batches;  // device index -> its spans (bytes)
#endif
  for (size_t i = 0; i < dst.size(); ++i) {
    LOOM_CHECK(dst[i].defined() && src[i].defined(), ValueError,
               "[copy_all] pair {} has an undefined tensor", i);
#ifdef LOOM_WITH_CUDA
    if (copies_as_span(dst[i], src[i])) {
      check_inplace(dst[i], "copy_all");
      const int64_t bytes = src[i].numel() * static_cast<int64_t>(element_size(src[i].dtype()));
      batches[src[i].device().index].push_back({src[i].raw_data(), dst[i].raw_data(), bytes});
      continue;
    }
#endif
    Tensor(dst[i]).copy_(src[i]);
  }
#ifdef LOOM_WITH_CUDA
  for (const auto& [device, spans] : batches) {
    DeviceGuard guard(Device::cuda(device));
    cuda::copy_spans(spans);
  }
#endif
}

// --- in place ---------------------------------------------------------------------

Tensor& Tensor::fill_(double value) {
  trace::OpScope trace("fill_");
  if (trace.recording()) trace.record({*this}, std::vector<Tensor>{});  // the exporter refuses in-place ops
  check_inplace(*this, "fill_");
  if (device().is_cpu()) {
    cpu::fill(strided(), value);
  } else {
#ifdef LOOM_WITH_CUDA
    DeviceGuard guard(device());
    cuda::fill(strided(), value);
#endif
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  LOOM_CHECK(src.defined(), ValueError, "[copy_] the source tensor is undefined");
  Shape target = broadcast_shapes(src.sizes(), sizes(), "copy_");
  LOOM_CHECK(target == sizes(), ShapeError,
             "[copy_] source of shape {} cannot be broadcast to the destination's shape {}",
             shape_str(src.sizes()), shape_str(sizes()));
  check_inplace(*this, "copy_");
  trace::OpScope trace("copy_");
  if (trace.recording()) trace.record({*this, src}, std::vector<Tensor>{});
  copy_values(*this, src.detach().expand(sizes()));
  return *this;
}

// --- autograd ---------------------------------------------------------------------

bool Tensor::requires_grad() const { return checked().requires_grad; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  LOOM_CHECK(is_leaf(), AutogradError,
             "[requires_grad_] only leaf tensors can change requires_grad; this one is the "
             "output of '{}' (use .detach().requires_grad_() for a new leaf)",
             grad_fn()->name());
  LOOM_CHECK(!requires_grad || is_floating(dtype()), TypeError,
             "[requires_grad_] only floating-point tensors can require grad, got {}",
             dtype_name(dtype()));
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return checked().grad_fn == nullptr; }
const Tensor& Tensor::grad() const { return checked().grad; }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return checked().grad_fn; }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    LOOM_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
               ValueError,
               "[set_grad] gradient {} {} on {} does not match the tensor {} {} on {}",
               shape_str(grad.sizes()), dtype_name(grad.dtype()), grad.device().str(),
               shape_str(sizes()), dtype_name(dtype()), device().str());
  }
  impl_->grad = grad;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& impl = checked();
  auto detached = std::make_shared<TensorImpl>();
  detached->storage = impl.storage;
  detached->offset = impl.offset;
  detached->sizes = impl.sizes;
  detached->strides = impl.strides;
  detached->dtype = impl.dtype;
  return Tensor(std::move(detached));
}

Tensor Tensor::make_view(Shape sizes, Shape strides, int64_t offset) const {
  Tensor view = detach();
  view.impl_->sizes = std::move(sizes);
  view.impl_->strides = std::move(strides);
  view.impl_->offset = offset;
  return view;
}

}  // namespace loom
