// File: core/view.cc
// Views: new sizes/strides/offset over the same storage, each with its backward.
#include <algorithm>
#include <numeric>
#include <optional>

#include "core/autograd.h"
#include "core/cpu/reduce.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/reduce.h"
#endif
#include "core/error.h"
#include "core/tensor.h"
#include "core/trace.h"

namespace loom {

namespace {

// Strides that let `new_sizes` view memory laid out as (sizes, strides), or
// nullopt when the elements would need to move. Works chunk by chunk: a chunk
// is a run of old dims that are contiguous with each other, and the new dims
// must split each chunk exactly.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  if (numel_of(sizes) == 0 || sizes.empty()) return contiguous_strides(new_sizes);
  Shape new_strides(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_stride = strides.back(), chunk_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    chunk_numel *= sizes[d];
    bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != chunk_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// Resolves one -1 and checks the element count.
Shape infer_sizes(Shape sizes, int64_t numel, const Shape& from, std::string_view op) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      LOOM_CHECK(infer_at < 0, ValueError, "[{}] only one size may be -1, got {}", op, shape_str(sizes));
      infer_at = static_cast<int64_t>(i);
    } else {
      LOOM_CHECK(sizes[i] >= 0, ValueError, "[{}] invalid size {} in {}", op, sizes[i], shape_str(sizes));
      known *= sizes[i];
    }
  }
  if (infer_at >= 0) {
    LOOM_CHECK(known != 0 && numel % known == 0, ShapeError,
               "[{}] shape {} is invalid for input of shape {} ({} elements)", op,
               shape_str(sizes), shape_str(from), numel);
    sizes[infer_at] = numel / known;
  }
  LOOM_CHECK(numel_of(sizes) == numel, ShapeError,
             "[{}] shape {} is invalid for input of shape {} ({} elements)", op, shape_str(sizes),
             shape_str(from), numel);
  return sizes;
}

void record_reshape_back(const Tensor& input, Tensor& out, std::string name) {
  if (!needs_grad({input})) return;
  Shape sizes = input.sizes();
  record(std::move(name), {input}, out, [sizes](const Tensor& dy) {
    return std::vector<Tensor>{dy.reshape(sizes)};
  });
}

// Backward of views that pick a subset of elements: scatter dy into zeros laid
// out as the input is, so that adding dx to the input's other gradients walks
// both dense (a channels-last input gets channels-last zeros).
template <class PickFn>
void record_scatter_back(const Tensor& input, Tensor& out, std::string name, PickFn pick) {
  if (!needs_grad({input})) return;
  Shape sizes = input.sizes();
  const MemoryFormat format = input.suggest_memory_format();
  record(std::move(name), {input}, out, [sizes, format, pick](const Tensor& dy) {
    TensorOptions options = dy.options();
    options.memory_format = format;
    Tensor dx = zeros(sizes, options);
    pick(dx).copy_(dy);
    return std::vector<Tensor>{dx};
  });
}

Tensor sum_to_sizes(const Tensor& dy, const Shape& sizes) {
  // Leading broadcast dims are summed by viewing them as size-1 dims of `sizes`.
  Shape keep(dy.dim(), 1);
  std::copy(sizes.begin(), sizes.end(), keep.end() - static_cast<int64_t>(sizes.size()));
  if (keep == dy.sizes()) return dy.reshape(sizes);
  Tensor out = empty(keep, dy.options());
  if (dy.device().is_cuda()) {
#ifdef LOOM_WITH_CUDA
    DeviceGuard guard(dy.device());
    cuda::reduce(out.strided(), dy.strided(), kernel::ReduceOp::Sum);
#endif
  } else {
    cpu::reduce(out.strided(), dy.strided(), kernel::ReduceOp::Sum);
  }
  return out.reshape(sizes);
}

}  // namespace

Tensor Tensor::view(Shape new_sizes) const {
  trace::OpScope trace("reshape");
  new_sizes = infer_sizes(std::move(new_sizes), numel(), sizes(), "view");
  std::optional<Shape> new_strides = view_strides(sizes(), strides(), new_sizes);
  LOOM_CHECK(new_strides.has_value(), ShapeError,
             "[view] cannot view a tensor of shape {} and strides {} as {} without copying; "
             "use .reshape() (which copies) or call .contiguous() first",
             shape_str(sizes()), shape_str(strides()), shape_str(new_sizes));
  Tensor out = make_view(new_sizes, *new_strides, storage_offset());
  record_reshape_back(*this, out, "view");
  if (trace.recording()) trace.record({*this}, out, {{"shape", out.sizes()}});
  return out;
}

Tensor Tensor::reshape(Shape new_sizes) const {
  trace::OpScope trace("reshape");
  new_sizes = infer_sizes(std::move(new_sizes), numel(), sizes(), "reshape");
  Tensor out = view_strides(sizes(), strides(), new_sizes) ? view(new_sizes) : contiguous().view(new_sizes);
  if (trace.recording()) trace.record({*this}, out, {{"shape", out.sizes()}});
  return out;
}

Tensor Tensor::permute(const Shape& dims) const {
  trace::OpScope trace("permute");
  LOOM_CHECK(static_cast<int64_t>(dims.size()) == dim(), ValueError,
             "[permute] got {} dims {} for a tensor of shape {}", dims.size(), shape_str(dims),
             shape_str(sizes()));
  Shape new_sizes(dim()), new_strides(dim()), inverse(dim(), -1);
  for (int64_t i = 0; i < dim(); ++i) {
    int64_t d = normalize_dim(dims[i], dim(), "permute");
    LOOM_CHECK(inverse[d] < 0, ValueError, "[permute] dim {} repeats in {}", d, shape_str(dims));
    inverse[d] = i;
    new_sizes[i] = sizes()[d];
    new_strides[i] = strides()[d];
  }
  Tensor out = make_view(new_sizes, new_strides, storage_offset());
  if (needs_grad({*this})) {
    record("permute", {*this}, out, [inverse](const Tensor& dy) {
      return std::vector<Tensor>{dy.permute(inverse)};
    });
  }
  if (trace.recording()) {
    Shape order(dim());
    for (int64_t i = 0; i < dim(); ++i) order[inverse[i]] = i;
    trace.record({*this}, out, {{"dims", order}});
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Shape dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  if (dim() == 0) {  // PyTorch allows transpose(0, -1) of a 0-d tensor: a no-op
    normalize_dim(dim0, 0, "transpose");
    normalize_dim(dim1, 0, "transpose");
    return *this;
  }
  std::swap(dims[normalize_dim(dim0, dim(), "transpose")], dims[normalize_dim(dim1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::t() const {
  LOOM_CHECK(dim() <= 2, ShapeError, "[t] expects a tensor with at most 2 dims, got shape {}",
             shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  trace::OpScope trace("slice");
  int64_t d = checked_dim(*this, dim_, "slice");
  LOOM_CHECK(step > 0, ValueError, "[slice] step must be positive, got {}", step);
  int64_t size = sizes()[d];
  auto clip = [size](int64_t i) { return std::clamp(i < 0 ? i + size : i, int64_t{0}, size); };
  start = clip(start);
  end = std::max(clip(end), start);
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes[d] = (end - start + step - 1) / step;
  new_strides[d] *= step;
  Tensor out = make_view(new_sizes, new_strides, storage_offset() + start * strides()[d]);
  record_scatter_back(*this, out, "slice", [d, start, end, step](const Tensor& dx) {
    return dx.slice(d, start, end, step);
  });
  if (trace.recording()) {
    trace.record({*this}, out, {{"dim", d}, {"start", start}, {"end", end}, {"step", step}});
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  int64_t d = checked_dim(*this, dim_, "narrow");
  int64_t size = sizes()[d];
  if (start < 0) start += size;
  LOOM_CHECK(start >= 0 && length >= 0 && start + length <= size, IndexError,
             "[narrow] start {} and length {} do not fit in dim {} of size {} (shape {})", start,
             length, d, size, shape_str(sizes()));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  trace::OpScope trace("select");
  int64_t d = checked_dim(*this, dim_, "select");
  int64_t size = sizes()[d];
  LOOM_CHECK(index >= -size && index < size, IndexError,
             "[select] index {} is out of range for dim {} of size {} (shape {})", index, d, size,
             shape_str(sizes()));
  if (index < 0) index += size;
  Shape new_sizes = sizes(), new_strides = strides();
  new_sizes.erase(new_sizes.begin() + d);
  new_strides.erase(new_strides.begin() + d);
  Tensor out = make_view(new_sizes, new_strides, storage_offset() + index * strides()[d]);
  record_scatter_back(*this, out, "select", [d, index](const Tensor& dx) {
    return dx.select(d, index);
  });
  if (trace.recording()) trace.record({*this}, out, {{"dim", d}, {"index", index}});
  return out;
}

Tensor Tensor::expand(const Shape& new_sizes_in) const {
  trace::OpScope trace("expand");
  LOOM_CHECK(new_sizes_in.size() >= sizes().size(), ShapeError,
             "[expand] cannot expand shape {} to {} with fewer dims", shape_str(sizes()),
             shape_str(new_sizes_in));
  size_t lead = new_sizes_in.size() - sizes().size();
  Shape new_sizes = new_sizes_in, new_strides(new_sizes.size(), 0);
  for (size_t i = lead; i < new_sizes.size(); ++i) {
    int64_t old = sizes()[i - lead];
    if (new_sizes[i] == -1) new_sizes[i] = old;
    LOOM_CHECK(old == new_sizes[i] || old == 1, ShapeError,
               "[expand] shape {} cannot be expanded to {}: dim {} has size {} (only size-1 dims "
               "expand)",
               shape_str(sizes()), shape_str(new_sizes_in), i - lead, old);
    new_strides[i] = old == new_sizes[i] ? strides()[i - lead] : 0;
  }
  for (size_t i = 0; i < lead; ++i) {
    LOOM_CHECK(new_sizes[i] >= 0, ShapeError, "[expand] invalid size {} in {}", new_sizes[i],
               shape_str(new_sizes_in));
  }
  if (new_sizes == sizes()) return *this;
  Tensor out = make_view(new_sizes, new_strides, storage_offset());
  if (needs_grad({*this})) {
    Shape sizes_in = sizes();
    record("expand", {*this}, out, [sizes_in](const Tensor& dy) {
      return std::vector<Tensor>{sum_to_sizes(dy, sizes_in)};
    });
  }
  if (trace.recording()) trace.record({*this}, out, {{"shape", out.sizes()}});
  return out;
}

Tensor Tensor::squeeze() const {
  Shape new_sizes;
  for (int64_t s : sizes()) {
    if (s != 1) new_sizes.push_back(s);
  }
  return new_sizes.size() == sizes().size() ? *this : reshape(new_sizes);
}

Tensor Tensor::squeeze(int64_t dim_) const {
  int64_t d = normalize_dim(dim_, dim(), "squeeze");
  if (dim() == 0) return *this;
  if (sizes()[d] != 1) return *this;
  Shape new_sizes = sizes();
  new_sizes.erase(new_sizes.begin() + d);
  return reshape(new_sizes);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  trace::OpScope trace("unsqueeze");
  int64_t d = normalize_dim(dim_, dim() + 1, "unsqueeze");
  Shape new_sizes = sizes(), new_strides = strides();
  int64_t stride = d < dim() ? sizes()[d] * strides()[d] : 1;
  new_sizes.insert(new_sizes.begin() + d, 1);
  new_strides.insert(new_strides.begin() + d, stride);
  Tensor out = make_view(new_sizes, new_strides, storage_offset());
  record_reshape_back(*this, out, "unsqueeze");
  if (trace.recording()) trace.record({*this}, out, {{"dim", d}});
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  int64_t start = normalize_dim(start_dim, dim(), "flatten");
  int64_t end = normalize_dim(end_dim, dim(), "flatten");
  if (dim() == 0) return reshape({1});  // as PyTorch, after the dims are checked: flatten(1) of a scalar throws
  LOOM_CHECK(start <= end, ValueError, "[flatten] start_dim {} comes after end_dim {}", start, end);
  Shape new_sizes(sizes().begin(), sizes().begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= sizes()[d];
  new_sizes.push_back(merged);
  new_sizes.insert(new_sizes.end(), sizes().begin() + end + 1, sizes().end());
  return reshape(new_sizes);
}

}  // namespace loom
