// File: core/ops/pooling.cc
// Pooling ops: validate like PyTorch, size the output, call the CPU kernels, record backward.
// N batch, C channels, H, W input plane, P, Q output plane.
#include "core/ops/pooling.h"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/autograd.h"
#include "core/cpu/pool.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/pool.h"
#include "core/cuda/pool_window.h"
#include "core/cudnn/pool.h"
#include "core/error.h"
#include "core/onednn/pool.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/trace.h"

namespace loom {
namespace {

using Pair = std::array<int64_t, 2>;

std::string pair_str(const Pair& v) { return fmt::format("({}, {})", v[0], v[1]); }

// Rounds toward negative infinity, as PyTorch's div_rtn (C++ `/` truncates).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// One output dim, as PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  int64_t out = floor_div(in + 2 * pad - kernel + (ceil_mode ? stride - 1 : 0), stride) + 1;
  // With ceil_mode the last window must still start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Every pooling op takes a float CPU (N, C, H, W) tensor with non-empty planes.
void check_pool_input(const Tensor& x, std::string_view op) {
  check_float_tensor(x, op);
  LOOM_CHECK(x.dim() == 4, ShapeError,
             "[{}] expects a 4-D input (N, C, H, W) but got shape {}; for a single image add "
             "the batch dim with unsqueeze(0)",
             op, shape_str(x.sizes()));
  LOOM_CHECK(x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0, ShapeError,
             "[{}] expects non-empty C, H and W but got input shape {}", op, shape_str(x.sizes()));
}

// The checked options: what every backend's kernels take, and the output's sizes.
struct CheckedPool {
  kernel::Pool2dParams params;
  Shape out_sizes;  // (N, C, P, Q)
};

void check_pool_options(const Pair& kernel, const Pair& stride, const Pair& pad,
                        std::string_view op) {
  LOOM_CHECK(kernel[0] > 0 && kernel[1] > 0, ValueError,
             "[{}] kernel_size must be positive but got {}", op, pair_str(kernel));
  LOOM_CHECK(stride[0] > 0 && stride[1] > 0, ValueError, "[{}] stride must be positive but got {}",
             op, pair_str(stride));
  LOOM_CHECK(pad[0] >= 0 && pad[1] >= 0, ValueError, "[{}] padding must be non-negative but got {}",
             op, pair_str(pad));
  LOOM_CHECK(pad[0] <= kernel[0] / 2 && pad[1] <= kernel[1] / 2, ValueError,
             "[{}] pad should be at most half of effective kernel size, but got padding {} "
             "for kernel_size {}; use padding <= kernel_size / 2",
             op, pair_str(pad), pair_str(kernel));
}

CheckedPool pool_geometry(const Tensor& x, const Pool2dOptions& options, bool max, std::string_view op) {
  const Pair kernel = options.kernel_size, stride = options.stride.value_or(kernel),
             pad = options.padding;
  check_pool_options(kernel, stride, pad, op);
  LOOM_CHECK(options.output_format != MemoryFormat::Preserve, ValueError,
             "[{}] output_format must be contiguous or channels_last, got preserve; leave it unset "
             "to keep x's layout",
             op);
  const int64_t P = pooled_size(x.size(2), kernel[0], stride[0], pad[0], options.ceil_mode);
  const int64_t Q = pooled_size(x.size(3), kernel[1], stride[1], pad[1], options.ceil_mode);
  LOOM_CHECK(P >= 1 && Q >= 1, ShapeError,
             "[{}] output size ({}, {}) is too small: input {} with kernel_size {}, stride {}, "
             "padding {}, ceil_mode {}; use a smaller kernel or a larger input",
             op, P, Q, shape_str(x.sizes()), pair_str(kernel), pair_str(stride), pair_str(pad),
             options.ceil_mode);
  return {{kernel[0], kernel[1], stride[0], stride[1], pad[0], pad[1], max, options.count_include_pad},
          {x.size(0), x.size(1), P, Q}};
}

// x's dtype, device and layout (channels-last stays channels-last).
TensorOptions layout_of(const Tensor& x) {
  TensorOptions options = x.options();
  options.memory_format = x.suggest_memory_format();
  return options;
}

// y in the layout options ask for (x's by default).
Tensor in_output_format(const Tensor& y, const Pool2dOptions& options) {
  return options.output_format ? y.contiguous(*options.output_format) : y;
}

// dx from dy scattered to the forward's indices. The GPU gathers per input
// element instead, so overlapping windows sum in a fixed order.
void max_pool_backward(const Tensor& dx, const Tensor& dy, const Tensor& indices,
                       const kernel::Pool2dParams& params) {
  if (dx.device().is_cuda()) {
    DeviceGuard guard(dx.device());
    cuda::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided(), params);
    return;
  }
  cpu::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided());
}

MaxPool2dResult max_pool2d_impl(const Tensor& x, const Pool2dOptions& options,
                                std::string_view op) {
  check_pool_input(x, op);
  const CheckedPool geometry = pool_geometry(x, options, /*max=*/true, op);
  const TensorOptions layout = layout_of(x);
  TensorOptions index_layout = layout;
  index_layout.dtype = DType::Int64;
  Tensor y = empty(geometry.out_sizes, layout);
  Tensor indices = empty(geometry.out_sizes, index_layout);
  LOOM_KERNEL(x, max_pool2d_forward, y.strided(), indices.strided(), x.strided(), geometry.params);
  if (needs_grad({x})) {
    const Shape x_sizes = x.sizes();
    record(std::string(op), {x}, y,
           [=](const Tensor& dy) -> std::vector<Tensor> {
             Tensor dx = empty(x_sizes, layout);
             max_pool_backward(dx, dy, indices, geometry.params);
             return {dx};
           },
           {indices});
  }
  return {y, indices};
}

Tensor avg_pool2d_impl(const Tensor& x, const Pool2dOptions& options, std::string_view op) {
  check_pool_input(x, op);
  const CheckedPool geometry = pool_geometry(x, options, /*max=*/false, op);
  const TensorOptions layout = layout_of(x);
  Tensor y = empty(geometry.out_sizes, layout);
  LOOM_KERNEL(x, avg_pool2d_forward, y.strided(), x.strided(), geometry.params);
  if (needs_grad({x})) {
    const Shape x_sizes = x.sizes();
    record(std::string(op), {x}, y, [=](const Tensor& dy) -> std::vector<Tensor> {
      Tensor dx = empty(x_sizes, layout);
      LOOM_KERNEL(dx, avg_pool2d_backward, dx.strided(), dy.strided(), geometry.params);
      return {dx};
    });
  }
  return y;
}

// --- GPU: cuDNN resample graphs, following each layout's contract (NCHW:
// backward from x, y and dy; NHWC max: an int8 index recorded by the forward).
// They decline configurations they cannot compute exactly as PyTorch does, and
// the CUDA kernels above take those.

struct CudnnPoolSaved {
  Tensor x, y, index;  // what the layout's backward contract needs
  Tensor input;        // x, for Loom's kernels where cuDNN has no backward engine
};

// y from cuDNN, or an undefined tensor when cuDNN declines.
Tensor cudnn_pool(const Tensor& x_in, const Pool2dOptions& options, bool max, std::string_view op,
                  CudnnPoolSaved& saved) {
  const CheckedPool geometry = pool_geometry(x_in, options, max, op);
  const TensorOptions layout = layout_of(x_in);
  Tensor x = x_in.detach().contiguous(layout.memory_format);
  Tensor y = empty(geometry.out_sizes, layout);
  bool indexed = max && cudnn::pool_uses_index(x.strided());
  TensorOptions index_layout = layout;
  index_layout.dtype = DType::UInt8;  // cuDNN's int8 index, stored bytewise
  Tensor index = indexed ? empty(geometry.out_sizes, index_layout) : Tensor();
  Strided index_view = indexed ? index.strided() : Strided{};
  if (!cudnn::pool2d_forward(y.strided(), indexed ? &index_view : nullptr, x.strided(), geometry.params)) {
    return Tensor();
  }
  saved = indexed ? CudnnPoolSaved{Tensor(), Tensor(), index, Tensor()}
          : layout.memory_format == MemoryFormat::Contiguous
              ? CudnnPoolSaved{x, y.detach(), Tensor(), Tensor()}
              : CudnnPoolSaved{};
  saved.input = x;
  return y;
}

// dx by Loom's kernels, for a pooling cuDNN ran forward but has no backward
// engine for (e.g. a 1x1 average pool on channels-last input). Max pooling
// recomputes the int64 indices its kernel reads from the saved input.
void pool_backward_by_kernels(const Tensor& dx, const Tensor& dy, const Tensor& x,
                              const kernel::Pool2dParams& params) {
  if (!params.max) {
    cuda::avg_pool2d_backward(dx.strided(), dy.strided(), params);
    return;
  }
  TensorOptions index_options = dy.options();
  index_options.dtype = DType::Int64;
  Tensor values = empty_like(dy), indices = empty(dy.sizes(), index_options);
  cuda::max_pool2d_forward(values.strided(), indices.strided(), x.strided(), params);
  cuda::max_pool2d_backward(dx.strided(), dy.strided(), indices.strided(), params);
}

// --- GPU max pooling by Loom's window-index kernels (core/cuda/pool_window.h):
// a one-byte index per output, and a backward that writes each dx element once.
// They race cuDNN's graph per shape (forward, and backward when grad is on) at
// the first meeting; LOOM_POOL_KERNEL=loom|cudnn forces one, auto (the default)
// times them.

constexpr std::string_view kLoomPool = "loom", kCudnnPool = "cudnn";

// The one-byte window index (N, C, P, Q), in x's layout: the kernels' threads
// walk the input side's channel vectors.
Tensor window_index_for(const Tensor& x, const Shape& out_sizes) {
  TensorOptions options = layout_of(x);
  options.dtype = DType::UInt8;
  return empty(out_sizes, options);
}

// y straight in the asked-for layout: the kernels read x and write y in any two layouts.
Tensor window_max_pool(const Tensor& x_in, const CheckedPool& geometry, const Pool2dOptions& options,
                       std::string_view op) {
  const TensorOptions layout = layout_of(x_in);
  TensorOptions out_layout = layout;
  out_layout.memory_format = options.output_format.value_or(layout.memory_format);
  const Tensor x = x_in.detach();
  Tensor y = empty(geometry.out_sizes, out_layout);
  const Tensor index = window_index_for(x, geometry.out_sizes);
  cuda::max_pool2d_window_forward(y.strided(), index.strided(), x.strided(), geometry.params);
  if (needs_grad({x_in})) {
    const Shape x_sizes = x.sizes();
    // Where two gradients of y meet (a pool's output feeding a residual block), the kernel adds them as it reads.
    auto backward_sum = [=](const Tensor& dy_in, const Tensor& dy_addend) -> std::vector<Tensor> {
      const Tensor dy = dy_in.contiguous(out_layout.memory_format);
      const Strided addend = dy_addend.defined() ? dy_addend.strided() : Strided{};
      Tensor dx = empty(x_sizes, layout);
      cuda::max_pool2d_window_backward(dx.strided(), dy.strided(), index.strided(), geometry.params,
                                       dy_addend.defined() ? &addend : nullptr);
      return {dx};
    };
    record(std::string(op), {x_in}, y, [backward_sum](const Tensor& dy) { return backward_sum(dy, Tensor()); },
           backward_sum, {index});
  }
  return y;
}

// Both paths on scratch operands (y stands in for dy), for the timing race.
cuda::CandidateRuns max_pool_runs(const Tensor& x_in, const CheckedPool& geometry, bool backward) {
  DeviceGuard guard(x_in.device());
  const TensorOptions layout = layout_of(x_in);
  const Tensor x = x_in.detach().contiguous(layout.memory_format);
  const Tensor y = empty(geometry.out_sizes, layout), index = window_index_for(x, geometry.out_sizes);
  const Tensor dx = backward ? empty(x.sizes(), layout) : Tensor();
  auto loom = [=] {
    cuda::max_pool2d_window_forward(y.strided(), index.strided(), x.strided(), geometry.params);
    if (backward) {
      cuda::max_pool2d_window_backward(dx.strided(), y.strided(), index.strided(), geometry.params);
    }
    return true;
  };
  auto cudnn = [=] {
    const kernel::Pool2dParams& args = geometry.params;
    const bool indexed = cudnn::pool_uses_index(x.strided());
    Strided xs = x.strided(), ys = y.strided(), is = indexed ? index.strided() : Strided{};
    if (!cudnn::pool2d_forward(ys, indexed ? &is : nullptr, xs, args)) return false;
    if (!backward) return true;
    const cudnn::PoolBackwardInputs inputs{indexed ? nullptr : &xs, indexed ? nullptr : &ys,
                                           indexed ? &is : nullptr};
    return cudnn::pool2d_backward(dx.strided(), ys, inputs, args);
  };
  return {loom, cudnn};
}

bool window_max_pool_chosen(const Tensor& x, const CheckedPool& geometry) {
  static cuda::KernelChoice choice("LOOM_POOL_KERNEL");
  if (!cuda::max_pool2d_window_supported(geometry.params)) return false;
  const bool backward = needs_grad({x});
  const kernel::Pool2dParams& k = geometry.params;
  const std::string key = fmt::format(
      "max_pool2d {} {} {} kernel {}x{} stride {}x{} pad {}x{} out {} backward {}",
      dtype_name(x.dtype()), shape_str(x.sizes()), shape_str(x.strides()), k.kernel_h, k.kernel_w,
      k.stride_h, k.stride_w, k.pad_h, k.pad_w, shape_str(geometry.out_sizes), backward);
  const std::string pick =
      choice.choose(key, {std::string(kLoomPool), std::string(kCudnnPool)},
                    [&] { return max_pool_runs(x, geometry, backward); });
  return pick == kLoomPool;
}

Tensor pool_gpu(const Tensor& x, const Pool2dOptions& options, bool max, std::string_view op) {
  DeviceGuard guard(x.device());
  check_pool_input(x, op);
  if (x.numel() == 0) {  // an empty batch: Loom's kernels launch nothing; no cuDNN graph takes zero-size dims
    return max ? max_pool2d_impl(x, options, op).values : avg_pool2d_impl(x, options, op);
  }
  if (max) {
    const CheckedPool geometry = pool_geometry(x, options, max, op);
    if (window_max_pool_chosen(x, geometry)) return window_max_pool(x, geometry, options, op);
  }
  CudnnPoolSaved saved;
  Tensor y = cudnn_pool(x, options, max, op, saved);
  if (!y.defined()) return max ? max_pool2d_impl(x, options, op).values : avg_pool2d_impl(x, options, op);
  if (needs_grad({x})) {
    const CheckedPool geometry = pool_geometry(x, options, max, op);
    const kernel::Pool2dParams args = geometry.params;
    const TensorOptions layout = layout_of(x);
    const Shape x_sizes = x.sizes();
    record(std::string(op), {x}, y, [=](const Tensor& dy_in) -> std::vector<Tensor> {
      Tensor dy = dy_in.contiguous(layout.memory_format);
      Tensor dx = empty(x_sizes, layout);
      Strided xs = saved.x.defined() ? saved.x.strided() : Strided{};
      Strided ys = saved.y.defined() ? saved.y.strided() : Strided{};
      Strided is = saved.index.defined() ? saved.index.strided() : Strided{};
      cudnn::PoolBackwardInputs inputs{saved.x.defined() ? &xs : nullptr, saved.y.defined() ? &ys : nullptr,
                                       saved.index.defined() ? &is : nullptr};
      if (!cudnn::pool2d_backward(dx.strided(), dy.strided(), inputs, args)) {
        pool_backward_by_kernels(dx, dy, saved.input, args);
      }
      return {dx};
    }, {saved.x, saved.y, saved.index, saved.input});
  }
  return y;
}

// --- CPU: oneDNN's pooling, max pooling's backward from the forward's
// workspace (oneDNN's argmax record, kept instead of int64 indices).

// y, or an undefined tensor where the oneDNN tier declines x.
Tensor pool_onednn(const Tensor& x_in, const Pool2dOptions& options, bool max, std::string_view op) {
  check_pool_input(x_in, op);
  const CheckedPool geometry = pool_geometry(x_in, options, max, op);
  const TensorOptions layout = layout_of(x_in);
  const Tensor x = x_in.detach().contiguous(layout.memory_format);
  Tensor y = empty(geometry.out_sizes, layout);
  const kernel::Pool2dParams args = geometry.params;
  const bool training = needs_grad({x_in});
  const std::optional<int64_t> bytes = onednn::pool2d_workspace_bytes(y.strided(), x.strided(), args, training);
  if (!bytes) return Tensor();
  TensorOptions byte_options = x.options();
  byte_options.dtype = DType::UInt8;
  byte_options.memory_format = MemoryFormat::Contiguous;
  const Tensor workspace = *bytes > 0 ? empty({*bytes}, byte_options) : Tensor();
  void* record_to = workspace.defined() ? workspace.raw_data() : nullptr;
  LOOM_CHECK(onednn::pool2d_forward(y.strided(), x.strided(), record_to, args, training), OnednnError,
             "[{}] oneDNN declined a pooling it had planned (input {})", op, shape_str(x.sizes()));
  if (!training) return y;
  const Shape x_sizes = x.sizes();
  record(std::string(op), {x_in}, y, [=](const Tensor& dy_in) -> std::vector<Tensor> {
    const Tensor dy = dy_in.contiguous(layout.memory_format);
    Tensor dx = empty(x_sizes, layout);
    const void* recorded = workspace.defined() ? workspace.raw_data() : nullptr;
    LOOM_CHECK(onednn::pool2d_backward(dx.strided(), dy.strided(), recorded, args), OnednnError,
               "[{}] oneDNN declined the backward of a pooling it had planned (input {})", op,
               shape_str(x_sizes));
    return {dx};
  }, {workspace});
  return y;
}

// Max pooling values (the indices stay internal): cuDNN on the GPU, oneDNN or
// the reference kernels on the CPU. y in x's layout (or the one the GPU kernel wrote).
Tensor pool_values(const Tensor& x, const Pool2dOptions& options, bool max, std::string_view op) {
  if (x.defined() && x.device().is_cuda()) return pool_gpu(x, options, max, op);
  if (x.defined() && on_onednn_tier(x)) {
    Tensor y = pool_onednn(x, options, max, op);
    if (y.defined()) return y;
  }
  return max ? max_pool2d_impl(x, options, op).values : avg_pool2d_impl(x, options, op);
}

Tensor max_or_avg(const Tensor& x, const Pool2dOptions& options, bool max, std::string_view op) {
  return in_output_format(pool_values(x, options, max, op), options);
}

// A window covering the whole plane.
Pool2dOptions whole_plane(const Tensor& x, std::string_view op) {
  check_pool_input(x, op);
  return {.kernel_size = {x.size(2), x.size(3)}};
}

// What a trace records of a pooling: the window, its stride, padding and
// rounding, and the output layout when the caller chose one.
std::vector<trace::Attribute> pool_attributes(const Pool2dOptions& o) {
  const std::array<int64_t, 2> stride = o.stride.value_or(o.kernel_size);
  std::vector<trace::Attribute> attributes = {
      {"kernel_size", std::vector<int64_t>(o.kernel_size.begin(), o.kernel_size.end())},
      {"stride", std::vector<int64_t>(stride.begin(), stride.end())},
      {"padding", std::vector<int64_t>(o.padding.begin(), o.padding.end())},
      {"ceil_mode", int64_t{o.ceil_mode}},
      {"count_include_pad", int64_t{o.count_include_pad}}};
  if (o.output_format) attributes.push_back({"output_format", std::string(memory_format_name(*o.output_format))});
  return attributes;
}

}  // namespace

MaxPool2dResult max_pool2d_with_indices(const Tensor& x, const Pool2dOptions& options) {
  trace::OpScope trace("max_pool2d_with_indices");
  MaxPool2dResult result = max_pool2d_impl(x, options, "max_pool2d");
  MaxPool2dResult out{in_output_format(result.values, options), in_output_format(result.indices, options)};
  if (trace.recording()) trace.record({x}, {out.values, out.indices}, pool_attributes(options));
  return out;
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  trace::OpScope trace("max_pool2d");
  // Fusion by tracing: a pool before a flatten may write its output contiguous
  // (fusion::TracedPlan::contiguous_pools); a layout the caller chose stays.
  if (!options.output_format && trace.substituting()) {
    if (auto y = trace.substitute({x}, pool_attributes(options))) return *y;
  }
  Tensor y = max_or_avg(x, options, /*max=*/true, "max_pool2d");
  if (trace.recording()) trace.record({x}, y, pool_attributes(options));
  return y;
}

// 16-bit channels-last average pooling with padding returned non-finite values
// on the H100 (cuDNN 9.19 and the Loom kernel alike), so it pools in fp32 NCHW
// between differentiable casts and layout changes.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  trace::OpScope trace("avg_pool2d");
  Tensor y;
  const bool padded = options.padding[0] > 0 || options.padding[1] > 0;
  if (x.defined() && x.device().is_cuda() && is_half_precision(x.dtype()) && padded) {
    const MemoryFormat format = options.output_format.value_or(x.suggest_memory_format());
    Pool2dOptions nchw = options;
    nchw.output_format = MemoryFormat::Contiguous;
    y = max_or_avg(x.to(DType::Float32).contiguous(), nchw, /*max=*/false, "avg_pool2d");
    y = y.to(x.dtype()).contiguous(format);
  } else {
    y = max_or_avg(x, options, /*max=*/false, "avg_pool2d");
  }
  if (trace.recording()) trace.record({x}, y, pool_attributes(options));
  return y;
}

Tensor global_max_pool2d(const Tensor& x) {
  trace::OpScope trace("global_max_pool2d");
  Tensor y = max_or_avg(x, whole_plane(x, "global_max_pool2d"), true, "global_max_pool2d");
  if (trace.recording()) trace.record({x}, y);
  return y;
}

Tensor global_avg_pool2d(const Tensor& x) {
  trace::OpScope trace("global_avg_pool2d");
  Tensor y = max_or_avg(x, whole_plane(x, "global_avg_pool2d"), false, "global_avg_pool2d");
  if (trace.recording()) trace.record({x}, y);
  return y;
}

// The adaptive pools open no trace scope: a trace records the ops they are
// made of (one pooling window, or slices, means and a cat).

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  const auto [p, q] = output_size;
  LOOM_CHECK(x.dim() == 4, ShapeError, "[adaptive_avg_pool2d] expects input (N, C, H, W), got shape {}",
             shape_str(x.sizes()));
  LOOM_CHECK(p > 0 && q > 0, ValueError, "[adaptive_avg_pool2d] output_size must be positive, got ({}, {})",
             p, q);
  const int64_t h = x.size(2), w = x.size(3);
  if (h % p == 0 && w % q == 0) {
    return avg_pool2d(x, {.kernel_size = {h / p, w / q}, .stride = std::array<int64_t, 2>{h / p, w / q}});
  }
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < p; ++i) {
    const Tensor band = x.slice(2, i * h / p, ((i + 1) * h + p - 1) / p);
    std::vector<Tensor> cells;
    for (int64_t j = 0; j < q; ++j) {
      cells.push_back(mean(band.slice(3, j * w / q, ((j + 1) * w + q - 1) / q), {2, 3}, /*keepdim=*/true));
    }
    rows.push_back(cat(cells, 3));
  }
  return cat(rows, 2);
}

namespace {

// A 1-D pooling as `pool2d` of the view (N, C, 1, L) of x (N, C, L) or (C, L).
template <typename Pool2d>
Tensor pooled_along_length(const Tensor& x, std::string_view op, Pool2d pool2d) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] input is undefined", op);
  LOOM_CHECK(x.dim() == 2 || x.dim() == 3, ShapeError,
             "[{}] expects a 3-D input (N, C, L) or one 2-D sample (C, L), got shape {}", op, shape_str(x.sizes()));
  const Tensor batched = x.dim() == 2 ? x.unsqueeze(0) : x;
  const Tensor y = pool2d(batched.unsqueeze(2)).squeeze(2);
  return x.dim() == 2 ? y.squeeze(0) : y;
}

// The 2-D options of a 1-D pooling, its arguments checked in 1-D terms.
Pool2dOptions as_rows(const Tensor& x, const Pool1dOptions& o, std::string_view op) {
  const int64_t stride = o.stride.value_or(o.kernel_size);
  LOOM_CHECK(o.kernel_size > 0 && stride > 0 && o.padding >= 0 && o.padding <= o.kernel_size / 2, ValueError,
             "[{}] needs a positive kernel_size and stride and 0 <= padding <= kernel_size / 2, got kernel_size "
             "{}, stride {}, padding {}",
             op, o.kernel_size, stride, o.padding);
  if (x.defined() && x.dim() >= 2) {
    const int64_t length = pooled_size(x.size(-1), o.kernel_size, stride, o.padding, o.ceil_mode);
    LOOM_CHECK(length >= 1, ShapeError,
               "[{}] input {} with kernel_size {}, stride {}, padding {} gives an empty output ({}); use a "
               "smaller kernel or a longer input",
               op, shape_str(x.sizes()), o.kernel_size, stride, o.padding, length);
  }
  return {.kernel_size = {1, o.kernel_size},
          .stride = Pair{1, stride},
          .padding = {0, o.padding},
          .ceil_mode = o.ceil_mode,
          .count_include_pad = o.count_include_pad};
}

void check_output_size(int64_t output_size, std::string_view op) {
  LOOM_CHECK(output_size > 0, ValueError, "[{}] output_size must be positive, got {}", op, output_size);
}

}  // namespace

Tensor max_pool1d(const Tensor& x, const Pool1dOptions& options) {
  const Pool2dOptions rows = as_rows(x, options, "max_pool1d");
  return pooled_along_length(x, "max_pool1d", [&](const Tensor& x4) { return max_pool2d(x4, rows); });
}

Tensor avg_pool1d(const Tensor& x, const Pool1dOptions& options) {
  const Pool2dOptions rows = as_rows(x, options, "avg_pool1d");
  return pooled_along_length(x, "avg_pool1d", [&](const Tensor& x4) { return avg_pool2d(x4, rows); });
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  check_output_size(output_size, "adaptive_avg_pool1d");
  return pooled_along_length(x, "adaptive_avg_pool1d",
                             [&](const Tensor& x4) { return adaptive_avg_pool2d(x4, {1, output_size}); });
}

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  check_output_size(output_size, "adaptive_max_pool1d");
  return pooled_along_length(x, "adaptive_max_pool1d",
                             [&](const Tensor& x4) { return adaptive_max_pool2d(x4, {1, output_size}); });
}

}  // namespace loom
