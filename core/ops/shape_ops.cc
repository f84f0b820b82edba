// File: core/ops/shape_ops.cc
// cat: promotes the inputs to one dtype, copies each into its slice of a fresh
// output; backward hands each input its slice of dy. stack is cat of the
// inputs unsqueezed at the new dim; split and chunk are narrow views,
// unflatten a reshape, flip an index_select per dim. tril and triu mask x with
// where's kernels (the mask made from aranges on x's device), repeat expands
// x's interleaved copies and reshapes them: composites, whose parts record the
// gradient.
#include "core/ops/shape_ops.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops/compare.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/trace.h"

namespace loom {

bool cat_skips(const Tensor& t) { return t.dim() == 1 && t.numel() == 0; }

namespace {

bool same_sizes_except(const Shape& a, const Shape& b, int64_t dim) {
  for (size_t d = 0; d < a.size(); ++d) {
    if (static_cast<int64_t>(d) != dim && a[d] != b[d]) return false;
  }
  return true;
}

// Where cat's output takes its sizes from: `dim` in [0, ndim) and the first input
// cat does not skip (0 and the first input when it skips them all).
struct CatLayout {
  int64_t dim = 0;
  size_t first = 0;
};

// Validates the inputs against the first one cat does not skip.
CatLayout check_cat_inputs(const std::vector<Tensor>& tensors, int64_t dim) {
  LOOM_CHECK(!tensors.empty(), ValueError, "[cat] expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].defined(), ValueError, "[cat] tensor {} is undefined", i);
    LOOM_CHECK(tensors[i].device() == tensors[0].device(), DeviceError,
               "[cat] tensor {} is on {} but tensor 0 is on {}; move it with .to(Device) first", i,
               tensors[i].device().str(), tensors[0].device().str());
    LOOM_CHECK(tensors[i].dim() > 0, ShapeError,
               "[cat] tensor {} is zero-dimensional, which cannot be concatenated; unsqueeze(0) it first", i);
  }
  const auto first = std::find_if_not(tensors.begin(), tensors.end(), cat_skips);
  if (first == tensors.end()) return {};
  const size_t f = first - tensors.begin();
  const int64_t d = normalize_dim(dim, first->dim(), "cat");
  for (size_t i = f + 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    LOOM_CHECK(cat_skips(t) || (t.dim() == first->dim() && same_sizes_except(t.sizes(), first->sizes(), d)),
               ShapeError, "[cat] sizes must match except in dim {}: tensor {} has shape {} but tensor {} has shape {}",
               d, f, shape_str(first->sizes()), i, shape_str(t.sizes()));
  }
  return {.dim = d, .first = f};
}

// The inputs in the dtype they promote to together (torch.result_type): a
// bf16 activation meeting a float32 parameter is cast, differentiably, so
// its gradient comes back in bf16.
std::vector<Tensor> promoted(const std::vector<Tensor>& tensors) {
  DType common = tensors[0].dtype();
  for (const Tensor& t : tensors) common = promote_types(common, t.dtype());
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(t.to(common));
  return out;
}

bool any_needs_grad(const std::vector<Tensor>& tensors) {
  return grad_mode_enabled() && std::any_of(tensors.begin(), tensors.end(),
                                            [](const Tensor& t) { return t.requires_grad(); });
}

// The inputs' dtype and device, in their memory format when they all suggest
// the same one (as PyTorch's cat): channels-last inputs give a channels-last
// result, which the convolution that usually follows takes without a copy.
TensorOptions cat_options(const std::vector<Tensor>& tensors, const Tensor& first) {
  TensorOptions options = first.options();
  const MemoryFormat format = first.suggest_memory_format();
  const bool shared = std::all_of(tensors.begin(), tensors.end(), [&](const Tensor& t) {
    return cat_skips(t) || t.suggest_memory_format() == format;
  });
  if (shared) options.memory_format = format;
  return options;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& inputs, int64_t dim) {
  trace::OpScope trace("cat");
  const auto [d, f] = check_cat_inputs(inputs, dim);
  const std::vector<Tensor> tensors = promoted(inputs);
  const Tensor& first = tensors[f];
  std::vector<int64_t> lengths;  // each input's size along d (0 for those cat skips)
  std::vector<bool> skipped;
  for (const Tensor& t : tensors) {
    skipped.push_back(cat_skips(t));
    lengths.push_back(skipped.back() ? 0 : t.size(d));
  }
  Shape sizes = first.sizes();
  sizes[d] = 0;
  for (int64_t length : lengths) sizes[d] += length;
  Tensor out = empty(sizes, cat_options(tensors, first));
  {
    NoGradGuard no_grad;  // filling a fresh output is not part of the graph
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!skipped[i]) out.narrow(d, start, lengths[i]).copy_(tensors[i]);
      start += lengths[i];
    }
  }
  if (any_needs_grad(tensors)) {
    record("cat", tensors, out, [lengths, skipped, d](const Tensor& dy) {
      std::vector<Tensor> grads;
      int64_t start = 0;
      for (size_t i = 0; i < lengths.size(); ++i) {
        grads.push_back(skipped[i] ? empty({0}, dy.options()) : dy.narrow(d, start, lengths[i]));
        start += lengths[i];
      }
      return grads;
    });
  }
  if (trace.recording()) trace.record(inputs, out, {{"dim", d}});
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  trace::OpScope trace("stack");
  LOOM_CHECK(!tensors.empty(), ValueError, "[stack] expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].defined(), ValueError, "[stack] tensor {} is undefined", i);
    LOOM_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError,
               "[stack] every tensor must have the same shape: tensor 0 has shape {} but "
               "tensor {} has shape {}",
               shape_str(tensors[0].sizes()), i, shape_str(tensors[i].sizes()));
  }
  const int64_t ndim = tensors[0].dim() + 1;  // the result's
  LOOM_CHECK(dim >= -ndim && dim < ndim, IndexError,
             "[stack] dim {} is out of range for stacking tensors of shape {} (expected a dim "
             "in [{}, {}])",
             dim, shape_str(tensors[0].sizes()), -ndim, ndim - 1);
  const int64_t d = dim < 0 ? dim + ndim : dim;
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (const Tensor& t : tensors) unsqueezed.push_back(t.unsqueeze(d));
  Tensor out = cat(unsqueezed, d);
  if (trace.recording()) trace.record(tensors, out, {{"dim", d}});
  return out;
}

namespace {

// The dim split and chunk (`op`) cut x along, normalized; x must have one.
int64_t split_dim(const Tensor& x, int64_t dim, std::string_view op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is undefined", op);
  LOOM_CHECK(x.dim() > 0, ShapeError, "[{}] a zero-dimensional tensor has no dim to split; unsqueeze(0) it first",
             op);
  return normalize_dim(dim, x.dim(), op);
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  int64_t total = 0;
  for (int64_t size : sizes) {
    LOOM_CHECK(size >= 0, ValueError, "[split] sizes must be >= 0, got {}", shape_str(sizes));
    total += size;
  }
  LOOM_CHECK(total == x.size(d), ShapeError, "[split] sizes {} add up to {} but dim {} of shape {} has {}",
             shape_str(sizes), total, d, shape_str(x.sizes()), x.size(d));
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(x.narrow(d, start, size));
    start += size;
  }
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t length = x.size(split_dim(x, dim, "split"));
  LOOM_CHECK(split_size > 0 || (split_size == 0 && length == 0), ValueError,
             "[split] split_size must be > 0, got {}", split_size);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < length; start += split_size) sizes.push_back(std::min(split_size, length - start));
  if (sizes.empty()) sizes.push_back(0);  // an empty dim splits into one empty piece, as torch.split
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  LOOM_CHECK(chunks > 0, ValueError, "[chunk] chunks must be > 0, got {}", chunks);
  const int64_t length = x.size(split_dim(x, dim, "chunk"));
  const int64_t piece = (length + chunks - 1) / chunks;
  return split(x, std::max<int64_t>(piece, 1), dim);
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  const int64_t d = split_dim(x, dim, "unflatten");
  LOOM_CHECK(!sizes.empty(), ValueError, "[unflatten] sizes must name at least one dim");
  const int64_t length = x.size(d);
  Shape split_sizes = sizes;
  auto inferred = split_sizes.end();
  int64_t known = 1;
  for (auto it = split_sizes.begin(); it != split_sizes.end(); ++it) {
    LOOM_CHECK(*it >= -1, ValueError, "[unflatten] sizes must be >= 0 or one -1, got {}", shape_str(sizes));
    if (*it >= 0) {
      // Sizes whose product overflows int64 cannot match any dim.
      LOOM_CHECK(!__builtin_mul_overflow(known, *it, &known), ShapeError,
                 "[unflatten] sizes {} multiply past int64 but dim {} of shape {} has {}", shape_str(sizes), d,
                 shape_str(x.sizes()), length);
      continue;
    }
    LOOM_CHECK(inferred == split_sizes.end(), ValueError, "[unflatten] only one size may be -1, got {}",
               shape_str(sizes));
    inferred = it;
  }
  if (inferred != split_sizes.end()) {
    LOOM_CHECK(known > 0 && length % known == 0, ShapeError,
               "[unflatten] dim {} of shape {} has {} elements, which sizes {} cannot split", d, shape_str(x.sizes()),
               length, shape_str(sizes));
    *inferred = length / known;
    known = length;
  }
  LOOM_CHECK(known == length, ShapeError, "[unflatten] sizes {} multiply to {} but dim {} of shape {} has {}",
             shape_str(sizes), known, d, shape_str(x.sizes()), length);
  Shape out(x.sizes().begin(), x.sizes().begin() + d);
  out.insert(out.end(), split_sizes.begin(), split_sizes.end());
  out.insert(out.end(), x.sizes().begin() + d + 1, x.sizes().end());
  return x.reshape(out);
}

Tensor flip(const Tensor& x, const Shape& dims) {
  LOOM_CHECK(x.defined(), ValueError, "[flip] x is undefined");
  std::vector<bool> seen(std::max<int64_t>(x.dim(), 1), false);
  Tensor out = x;
  for (int64_t dim : dims) {
    const int64_t d = normalize_dim(dim, x.dim(), "flip");
    LOOM_CHECK(!seen[d], ValueError, "[flip] dim {} appears twice in {}", d, shape_str(dims));
    seen[d] = true;
    if (x.dim() == 0 || x.size(d) <= 1) continue;
    const Tensor reversed = arange(static_cast<double>(x.size(d) - 1), -1.0, -1.0,
                                   {.dtype = DType::Int64, .device = x.device()});
    out = index_select(out, d, reversed);
  }
  return out.is_same(x) ? x.clone() : out;  // nothing to reverse: still a copy, as torch.flip
}

namespace {

// x with the elements outside the triangle zeroed: tril (`lower`) drops those
// with column - row > diagonal, triu those with column - row < diagonal.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is undefined", op);
  LOOM_CHECK(x.dim() >= 2, ShapeError,
             "[{}] needs a tensor of 2 or more dims (its last two are the matrices), got shape {}; "
             "unsqueeze(0) a vector to make it a one-row matrix",
             op, shape_str(x.sizes()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  // A diagonal past either edge keeps or drops everything; clamped, it compares
  // exactly with the int64 offsets (as a double, exact to 2^53).
  const int64_t d = std::clamp(diagonal, -rows, cols);
  const TensorOptions index{.dtype = DType::Int64, .device = x.device()};
  const Tensor offset = arange(cols, index).unsqueeze(0) - arange(rows, index).unsqueeze(1);  // column - row
  const Tensor drop = lower ? gt(offset, static_cast<double>(d)) : lt(offset, static_cast<double>(d));
  return masked_fill(x, drop, 0.0);
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

namespace {

// A pass's view has a copy axis and a run of x's dims for each repeated dim,
// after a leading run: 2k + 1 axes for k repeated dims, so three per pass stay
// within the 8 dims the CUDA kernels take, whatever x's rank.
constexpr size_t kRepeatsPerPass = 3;

// Copy j of dim i sits at j * size(i) + p, so x viewed as its runs of
// unrepeated dims with a size-1 copy axis before each repeated dim expands the
// copy axes to their counts and reshapes to the tiled sizes; expand's backward
// sums dy over the copies. `repeats` has one count per dim of x.
Tensor tile_pass(const Tensor& x, const Shape& repeats) {
  Shape view{1}, expanded{1}, sizes;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const int64_t r = repeats[static_cast<size_t>(i)], s = x.size(i);
    if (r != 1) {
      view.insert(view.end(), {1, s});
      expanded.insert(expanded.end(), {r, s});
    } else {
      view.back() *= s;
      expanded.back() *= s;
    }
    sizes.push_back(r * s);
  }
  return x.reshape(view).expand(expanded).reshape(sizes);
}

}  // namespace

// x gets size-1 leading dims for the new ones, then is tiled kRepeatsPerPass
// repeated dims at a time (one pass, one copy, for up to three).
Tensor repeat(const Tensor& x, const Shape& repeats) {
  LOOM_CHECK(x.defined(), ValueError, "[repeat] x is undefined");
  LOOM_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), ShapeError,
             "[repeat] needs a repeat count for each of x's {} dims, got repeats {} for shape {}; "
             "pass 1 for the dims to keep",
             x.dim(), shape_str(repeats), shape_str(x.sizes()));
  const int64_t lead = static_cast<int64_t>(repeats.size()) - x.dim();
  Shape lifted(static_cast<size_t>(lead), 1), sizes;
  lifted.insert(lifted.end(), x.sizes().begin(), x.sizes().end());
  for (size_t i = 0; i < repeats.size(); ++i) {
    LOOM_CHECK(repeats[i] >= 0, ValueError, "[repeat] repeats must be >= 0, got {}", shape_str(repeats));
    int64_t size = 0;
    LOOM_CHECK(!__builtin_mul_overflow(repeats[i], lifted[i], &size), ValueError,
               "[repeat] repeats {} of shape {} overflow 64 bits", shape_str(repeats), shape_str(x.sizes()));
    sizes.push_back(size);
  }
  check_span(sizes, "repeat");
  Tensor out = x.reshape(lifted);
  for (size_t next = 0; next < repeats.size();) {
    Shape pass(repeats.size(), 1);
    // A pass also takes the 1s after its last repeated dim: no pass of only 1s.
    for (size_t taken = 0; next < repeats.size() && (taken < kRepeatsPerPass || repeats[next] == 1); ++next) {
      if (repeats[next] != 1) {
        pass[next] = repeats[next];
        ++taken;
      }
    }
    out = tile_pass(out, pass);
  }
  // Every repeat 1 of a contiguous x reshapes to a view of it: still a copy, as torch's.
  return out.storage() == x.storage() ? out.clone(MemoryFormat::Contiguous) : out;
}

namespace {

// x (*, C, H, W) split into (*, a, b, c, d, e) = `split`, permuted by `order` of
// those five, and reshaped to (*, `out`): the two pixel shuffles, in x's layout.
Tensor rearrange_last3(const Tensor& x, const Shape& split, const Shape& order, const Shape& out) {
  const int64_t lead = x.dim() - 3;
  Shape split_sizes(x.sizes().begin(), x.sizes().begin() + lead), dims, out_sizes = split_sizes;
  split_sizes.insert(split_sizes.end(), split.begin(), split.end());
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (int64_t d : order) dims.push_back(lead + d);
  out_sizes.insert(out_sizes.end(), out.begin(), out.end());
  const Tensor y = x.reshape(split_sizes).permute(dims).reshape(out_sizes);
  const bool channels_last = x.dim() == 4 && x.suggest_memory_format() == MemoryFormat::ChannelsLast;
  return channels_last ? y.contiguous(MemoryFormat::ChannelsLast) : y.contiguous();
}

// The factor and x's last three dims (C, H, W) for a pixel shuffle.
void check_pixel_shuffle(const Tensor& x, int64_t factor, std::string_view op, std::string_view factor_name) {
  LOOM_CHECK(x.defined(), ValueError, "[{}] x is undefined", op);
  LOOM_CHECK(x.dim() >= 3, ShapeError, "[{}] x must have at least 3 dims (*, C, H, W), got shape {}", op,
             shape_str(x.sizes()));
  LOOM_CHECK(factor >= 1, ValueError, "[{}] {} must be >= 1, got {}", op, factor_name, factor);
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  check_pixel_shuffle(x, r, "pixel_shuffle", "upscale_factor");
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  LOOM_CHECK(c % (r * r) == 0, ShapeError,
             "[pixel_shuffle] x of shape {} has {} channels (dim -3), not divisible by upscale_factor^2 = {}",
             shape_str(x.sizes()), c, r * r);
  // (C, r, r, H, W) -> (C, H, r, W, r)
  return rearrange_last3(x, {c / (r * r), r, r, h, w}, {0, 3, 1, 4, 2}, {c / (r * r), h * r, w * r});
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  check_pixel_shuffle(x, r, "pixel_unshuffle", "downscale_factor");
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  LOOM_CHECK(h % r == 0 && w % r == 0, ShapeError,
             "[pixel_unshuffle] x of shape {} has height {} and width {}; both must be divisible by "
             "downscale_factor {}",
             shape_str(x.sizes()), h, w, r);
  // (C, H, r, W, r) -> (C, r, r, H, W)
  return rearrange_last3(x, {c, h / r, r, w / r, r}, {0, 2, 4, 1, 3}, {c * r * r, h / r, w / r});
}

}  // namespace loom
