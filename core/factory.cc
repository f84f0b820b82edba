// File: core/factory.cc
// Tensor factories. Random numbers come from the Philox generator (element i
// uses counter offset + i), so a seed gives the same values on every device:
// on a GPU every draw is made there (the same bits, randn's to an ulp, and
// capturable in a CUDA graph), by the kernels of core/cuda/random.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/autograd.h"
#include "core/cpu/copy.h"
#include "core/cpu/philox.h"
#include "core/cuda/philox.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "core/trace.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/copy.h"
#include "core/cuda/random.h"
#endif

namespace loom {

namespace {

// Sizes that are non-negative and whose strides and byte size fit in int64.
void check_sizes(const Shape& sizes, std::string_view op, DType dtype = DType::Float64) {
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, ValueError, "[{}] sizes must be non-negative, got {}", op, shape_str(sizes));
  }
  LOOM_CHECK(checked_span(sizes, static_cast<int64_t>(element_size(dtype))).has_value(),
             ValueError,
             "[{}] shape {} of {} is too large: its strides or byte size overflow 64 bits "
             "(sizes of 0 count as 1 in the strides)",
             op, shape_str(sizes), dtype_name(dtype));
}

// Values are drawn this many at a time, so the staging buffer stays small
// whatever the tensor's size.
constexpr int64_t kRandomChunk = 1 << 16;

Tensor finish(Tensor t, const TensorOptions& options, std::string_view op) {
  if (options.requires_grad) {
    LOOM_CHECK(is_floating(t.dtype()), TypeError,
               "[{}] only floating-point tensors can require grad, got {}", op,
               dtype_name(t.dtype()));
    t.requires_grad_(true);
  }
  return t;
}

// How many random bits rand keeps for a dtype: as many as its significand
// holds (uniform_unit, core/generator.h).
int uniform_bits(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 11;
    case DType::BFloat16: return 8;
    case DType::Float64: return kTwoWordBits;
    default: return 24;
  }
}

// rand's value of a Philox block (the GPU's RandomDraw::Kind::Uniform).
class UnitDraw {
 public:
  explicit UnitDraw(DType dtype) : bits_(uniform_bits(dtype)) {}

  double operator()(const uint32_t* words) const { return uniform_unit(words, bits_); }

 private:
  int bits_;
};

// Fills a CPU tensor of options' dtype with draw(the four words of Philox block
// i) for element i (drawn_on_gpu, below, makes a GPU's draws).
template <class Fn>
Tensor random_tensor(const Shape& sizes, const TensorOptions& options, Generator* generator,
                     std::string_view op, Fn&& draw) {
  check_sizes(sizes, op, options.dtype);
  Generator& gen = generator ? *generator : default_generator();
  int64_t n = numel_of(sizes);
  // Row-major in the output dtype first (element i is draw i in every layout),
  // then the requested layout and device.
  Tensor host = empty(sizes, {.dtype = options.dtype});
  const uint64_t first = gen.reserve(static_cast<uint64_t>(n));
  auto* out = static_cast<char*>(host.raw_data());
  const auto bytes = static_cast<int64_t>(element_size(options.dtype));
  // Element i is draw(philox(seed, first + i)) whichever thread computes it: the
  // same bits at any thread count, and a batch of 512 images is not a serial
  // 0.4 s before a first training step.
  const int64_t chunks = (n + kRandomChunk - 1) / kRandomChunk;
  parallel_for(0, chunks, 1, [&](int64_t chunk_begin, int64_t chunk_end) {
    std::vector<double> values(static_cast<size_t>(std::min(n, kRandomChunk)));
    std::vector<uint32_t> blocks(4 * values.size());  // philox_blocks' lanes: 8 blocks a step
    for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
      const int64_t begin = chunk * kRandomChunk;
      const int64_t count = std::min(kRandomChunk, n - begin);
      cpu::philox_blocks(gen.seed(), first + static_cast<uint64_t>(begin), count, blocks.data());
      for (int64_t i = 0; i < count; ++i) values[i] = draw(&blocks[4 * i]);
      cpu::copy({out + begin * bytes, options.dtype, {count}, {1}},
                {values.data(), DType::Float64, {count}, {1}});
    }
  });
  if (options.memory_format != MemoryFormat::Contiguous &&
      options.memory_format != MemoryFormat::Preserve) {
    host = host.contiguous(options.memory_format);
  }
  return finish(host.to(options.device), options, op);
}

// A draw on a GPU, made there by core/cuda/random.h's kernels from the CPU's
// Philox blocks; nullopt on the CPU. Floats are drawn in float32 or float64 and
// rounded to 16 bits as the CPU rounds its doubles (rand's 8 or 11 bits are
// exact in float32); integers as doubles, as the CPU draws them.
std::optional<Tensor> drawn_on_gpu(const Shape& sizes, const TensorOptions& options, Generator* generator,
                                   const cuda::RandomDraw& draw, std::string_view op) {
#ifdef LOOM_WITH_CUDA
  if (!options.device.is_cuda()) return std::nullopt;
  check_sizes(sizes, op, options.dtype);
  TensorOptions fill = options;
  fill.requires_grad = false;
  const bool wide = draw.kind == cuda::RandomDraw::Kind::Integer || options.dtype == DType::Float64;
  fill.dtype = wide ? DType::Float64 : DType::Float32;
  Tensor out = empty(sizes, fill);
  DeviceGuard guard(out.device());
  Generator& gen = generator ? *generator : default_generator();
  cuda::fill_random(out.strided(), draw, cuda::philox_draw(gen, static_cast<uint64_t>(out.numel())));
  return finish(fill.dtype == options.dtype ? out : out.to(options.dtype), options, op);
#else
  return std::nullopt;
#endif
}

cuda::RandomDraw uniform_draw(DType dtype, double low = 0.0, double high = 1.0) {
  return {.kind = cuda::RandomDraw::Kind::Uniform, .bits = uniform_bits(dtype), .low = low, .span = high - low};
}

}  // namespace

Tensor empty(const Shape& sizes, TensorOptions options) {
  check_sizes(sizes, "empty", options.dtype);
  Shape strides = strides_for(sizes, options.memory_format);
  size_t nbytes = numel_of(sizes) * element_size(options.dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, options.device);
  impl->sizes = sizes;
  impl->strides = std::move(strides);
  impl->dtype = options.dtype;
  return finish(Tensor(std::move(impl)), options, "empty");
}

// Factories record nothing: what they make reaches a trace as a constant. Their
// scope keeps the fill inside them from reading as an in-place op of the forward.
Tensor full(const Shape& sizes, double value, TensorOptions options) {
  trace::OpScope trace("full");
  TensorOptions dense = options;
  dense.requires_grad = false;
  Tensor t = empty(sizes, dense);
  t.fill_(value);
  return finish(t, options, "full");
}

Tensor zeros(const Shape& sizes, TensorOptions options) { return full(sizes, 0.0, options); }
Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1.0, options); }

Tensor empty_like(const Tensor& like) {
  return empty(like.sizes(), {.dtype = like.dtype(),
                              .device = like.device(),
                              .memory_format = like.suggest_memory_format()});
}

Tensor zeros_like(const Tensor& like) {
  trace::OpScope trace("zeros_like");
  return empty_like(like).fill_(0.0);
}

Tensor ones_like(const Tensor& like) {
  trace::OpScope trace("ones_like");
  return empty_like(like).fill_(1.0);
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  LOOM_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             ValueError, "[arange] needs finite start, end and a non-zero step, got {}, {}, {}",
             start, end, step);
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
#ifdef LOOM_WITH_CUDA
  if (options.device.is_cuda()) {  // made on the device: a captured CUDA graph makes it again
    TensorOptions dense = options;
    dense.requires_grad = false;
    dense.memory_format = MemoryFormat::Contiguous;
    Tensor t = empty({n}, dense);
    DeviceGuard guard(t.device());
    cuda::arange(t.strided(), start, step);
    return finish(t, options, "arange");
  }
#endif
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return from_host(values.data(), DType::Float64, {n}, options);
}

Tensor arange(int64_t end, TensorOptions options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

// The diagonal is every (m + 1)-th element of the flat zeros, a strided view
// filled in place: one fill on the device, which a captured CUDA graph replays.
Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  trace::OpScope trace("eye");
  LOOM_CHECK(n >= 0 && m >= 0, ValueError, "[eye] n and m must be >= 0, got n = {} and m = {}", n, m);
  check_sizes({n, m}, "eye", options.dtype);
  TensorOptions dense = options;
  dense.requires_grad = false;
  dense.memory_format = MemoryFormat::Contiguous;  // a matrix has no other layout
  Tensor flat = zeros({n * m}, dense);
  if (flat.numel() > 0) flat.slice(0, 0, std::min(n, m) * (m + 1), m + 1).fill_(1.0);
  return finish(flat.view({n, m}), options, "eye");
}

Tensor eye(int64_t n, TensorOptions options) { return eye(n, n, options); }

namespace {

// A 16-bit float's value after one operation: c10's Half and BFloat16 round
// every +, -, * and / to 16 bits, and PyTorch's linspace computes in them.
template <class T>
float round16(double value) {
  return static_cast<float>(from_double<T>(value));
}

// PyTorch's linspace (its CUDA kernel and the CPU's element-wise loop; from 8
// float64 or 16 float32 elements on, the CPU's vectorized loop counts each
// block up from its first element and may differ by an ulp there): step
// = (end - start) / (steps - 1), element i = start + i * step in the first
// half and end - (steps - 1 - i) * step in the second, so the last is end
// exactly. Its compilers fuse each multiply-add (one rounding), and so does
// std::fma here: linspace(-1, 1, 7)'s middle is -2^-25 in float32, as there.
// 16-bit floats round after every operation, as c10's types do; integers step
// in double from the truncated start and end and truncate each element.
template <class T>
void linspace_values(double start, double end, int64_t steps, T* out) {
  const int64_t halfway = steps / 2;
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    const float s = round16<T>(start), e = round16<T>(end);
    const float step = round16<T>(round16<T>(e - s) / round16<T>(static_cast<double>(steps - 1)));
    for (int64_t i = 0; i < steps; ++i) {
      const float term = round16<T>(step * round16<T>(static_cast<double>(i < halfway ? i : steps - 1 - i)));
      out[i] = T(i < halfway ? s + term : e - term);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    const auto s = static_cast<T>(start), e = static_cast<T>(end);
    const T step = (e - s) / static_cast<T>(steps - 1);
    for (int64_t i = 0; i < steps; ++i) {
      const auto k = static_cast<T>(i < halfway ? i : steps - 1 - i);
      out[i] = i < halfway ? std::fma(step, k, s) : std::fma(-step, k, e);
    }
  } else {
    const auto s = static_cast<double>(static_cast<T>(start)), e = static_cast<double>(static_cast<T>(end));
    const double step = (e - s) / static_cast<double>(steps - 1);
    for (int64_t i = 0; i < steps; ++i) {
      const double k = static_cast<double>(i < halfway ? i : steps - 1 - i);
      out[i] = static_cast<T>(i < halfway ? std::fma(step, k, s) : std::fma(-step, k, e));
    }
  }
}

// Whether `value` truncates to an element of the integer type T: PyTorch's
// Scalar::to refuses the others, and a cast of them is undefined.
template <class T>
bool truncates_into(double value) {
  const double whole = std::trunc(value);
  return whole >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
         whole < static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
}

}  // namespace

// Made on the host and copied, as from_host: a linspace is a constant made once
// (a grid, a schedule), not inside a captured step.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  trace::OpScope trace("linspace");
  LOOM_CHECK(steps >= 0, ValueError, "[linspace] steps must be >= 0, got {}", steps);
  LOOM_CHECK(options.dtype != DType::Bool, TypeError,
             "[linspace] has no bool form; make a floating or integer one and compare it (linspace(...) > 0)");
  LOOM_CHECK(std::isfinite(start) && std::isfinite(end), ValueError,
             "[linspace] needs a finite start and end, got {} and {}", start, end);
  check_sizes({steps}, "linspace", options.dtype);
  Tensor host = empty({steps}, {.dtype = options.dtype});
  visit_dtype(options.dtype, [&]<class T>() {
    if constexpr (std::is_integral_v<T>) {
      LOOM_CHECK(truncates_into<T>(start) && truncates_into<T>(end), ValueError,
                 "[linspace] start {} and end {} must fit in {} (they are truncated to it); pick a wider dtype",
                 start, end, dtype_name(options.dtype));
    }
    T* out = host.data_ptr<T>();
    if (steps == 1) {
      out[0] = from_double<T>(start);  // PyTorch fills {start}: no step to divide by
    } else {
      linspace_values<T>(start, end, steps, out);
    }
  });
  return finish(host.to(options.device), options, "linspace");
}

Tensor rand(const Shape& sizes, TensorOptions options, Generator* generator) {
  LOOM_CHECK(is_floating(options.dtype), TypeError,
             "[rand] needs a floating dtype, got {}", dtype_name(options.dtype));
  if (std::optional<Tensor> t = drawn_on_gpu(sizes, options, generator, uniform_draw(options.dtype), "rand")) {
    return *t;
  }
  return random_tensor(sizes, options, generator, "rand", UnitDraw(options.dtype));
}

// One pass and one staging tensor: initialising a 224-pixel VGG on the CPU
// spent a third of its time in the two scalar ops and two temporaries of
// rand(...) * (high - low) + low.
Tensor& Tensor::uniform_(double low, double high, Generator* generator) {
  LOOM_CHECK(is_floating(dtype()), TypeError, "[uniform_] needs a floating tensor, got {}",
             dtype_name(dtype()));
  LOOM_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, ValueError,
             "[uniform_] needs finite low <= high, got low {} and high {}", low, high);
  check_inplace(*this, "uniform_");
  const TensorOptions on_device{.dtype = dtype(), .device = device()};
  if (std::optional<Tensor> t = drawn_on_gpu(sizes(), on_device, generator, uniform_draw(dtype(), low, high),
                                             "uniform_")) {
    return copy_(*t);
  }
  const UnitDraw unit(dtype());
  // In the type the elementwise scalar ops compute in (float64's own, float for
  // the other float dtypes), one rounding per op as theirs, so the values are
  // rand's scaled and shifted.
  auto scaled = [&]<class T>() {
    const T span = static_cast<T>(high - low), base = static_cast<T>(low);
    return random_tensor(sizes(), {.dtype = dtype()}, generator, "uniform_", [&](const uint32_t* bits) {
      const T value = static_cast<T>(unit(bits)) * span;
      return static_cast<double>(value + base);
    });
  };
  return copy_(dtype() == DType::Float64 ? scaled.operator()<double>() : scaled.operator()<float>());
}

Tensor randn(const Shape& sizes, TensorOptions options, Generator* generator) {
  LOOM_CHECK(is_floating(options.dtype), TypeError,
             "[randn] needs a floating dtype, got {}", dtype_name(options.dtype));
  const cuda::RandomDraw normal{.kind = cuda::RandomDraw::Kind::Normal};
  if (std::optional<Tensor> t = drawn_on_gpu(sizes, options, generator, normal, "randn")) return *t;
  return random_tensor(sizes, options, generator, "randn", normal_value);
}

namespace {

TensorOptions options_like(const Tensor& like, std::string_view op) {
  LOOM_CHECK(like.defined(), ValueError, "[{}] like is an undefined tensor", op);
  return {.dtype = like.dtype(), .device = like.device(), .memory_format = like.suggest_memory_format()};
}

}  // namespace

Tensor rand_like(const Tensor& like, Generator* generator) {
  return rand(like.sizes(), options_like(like, "rand_like"), generator);
}

Tensor randn_like(const Tensor& like, Generator* generator) {
  return randn(like.sizes(), options_like(like, "randn_like"), generator);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options,
               Generator* generator) {
  LOOM_CHECK(low < high, ValueError, "[randint] needs low < high, got low {} and high {}", low,
             high);
  auto range = static_cast<uint64_t>(high - low);
  const cuda::RandomDraw integer{.kind = cuda::RandomDraw::Kind::Integer, .integer_low = low, .range = range};
  if (std::optional<Tensor> t = drawn_on_gpu(sizes, options, generator, integer, "randint")) return *t;
  return random_tensor(sizes, options, generator, "randint",
                       [low, range](const uint32_t* words) { return integer_value(words, low, range); });
}

Tensor from_host(const void* data, DType src_dtype, const Shape& sizes, TensorOptions options) {
  check_sizes(sizes, "from_host");
  Strided src{const_cast<void*>(data), src_dtype, sizes, contiguous_strides(sizes)};
  Tensor host = empty(sizes, {.dtype = options.dtype, .memory_format = options.memory_format});
  cpu::copy(host.strided(), src);
  Tensor out = host.to(options.device);
  return finish(out, options, "from_host");
}

Tensor tensor(const std::vector<double>& values, const Shape& sizes, TensorOptions options) {
  LOOM_CHECK(static_cast<int64_t>(values.size()) == numel_of(sizes), ShapeError,
             "[tensor] {} values do not fill shape {} ({} elements)", values.size(),
             shape_str(sizes), numel_of(sizes));
  return from_host(values.data(), DType::Float64, sizes, options);
}

}  // namespace loom
