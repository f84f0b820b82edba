// File: core/shape.cc
// Sizes and strides: contiguous and channels-last strides, broadcasting, printing.
#include "core/shape.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/error.h"

namespace loom {

std::string_view memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve";
  }
  return "?";
}

int64_t numel_of(const Shape& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::optional<int64_t> checked_span(const Shape& sizes, int64_t element_bytes) {
  int64_t span = element_bytes;
  for (int64_t s : sizes) {
    if (s < 0 || __builtin_mul_overflow(span, std::max<int64_t>(s, 1), &span)) return std::nullopt;
  }
  return span;
}

void check_span(const Shape& sizes, std::string_view op) {
  LOOM_CHECK(checked_span(sizes, 1).has_value(), ValueError,
             "[{}] shape {} is too large: the product of its sizes (zeros counted as 1, as the "
             "strides count them) overflows 64 bits",
             op, shape_str(sizes));
}

Shape contiguous_strides(const Shape& sizes) {
  check_span(sizes, "contiguous_strides");
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

Shape channels_last_strides(const Shape& sizes) {
  LOOM_CHECK(sizes.size() == 4, ShapeError,
             "[channels_last] needs a 4-D (N, C, H, W) tensor, got shape {}", shape_str(sizes));
  check_span(sizes, "channels_last_strides");
  int64_t c = std::max<int64_t>(sizes[1], 1), h = std::max<int64_t>(sizes[2], 1),
          w = std::max<int64_t>(sizes[3], 1);
  return {h * w * c, 1, w * c, c};
}

Shape strides_for(const Shape& sizes, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? channels_last_strides(sizes)
                                              : contiguous_strides(sizes);
}

std::string shape_str(const Shape& sizes) {
  if (sizes.size() == 1) return fmt::format("({},)", sizes[0]);
  return fmt::format("({})", fmt::join(sizes, ", "));
}

Shape unravel_index(const Shape& sizes, int64_t flat) {
  Shape index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}

std::string position_str(const Shape& sizes, int64_t flat) {
  return sizes.size() == 1 ? std::to_string(flat) : shape_str(unravel_index(sizes, flat));
}

int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  LOOM_CHECK(dim >= lo && dim <= hi, IndexError,
             "[{}] dim {} is out of range for a {}-D tensor (expected {} to {})", op, dim, ndim,
             lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOOM_CHECK(da == db || da == 1 || db == 1, ShapeError,
               "[{}] shapes {} and {} cannot be broadcast: dim {} has sizes {} and {}", op,
               shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool has_layout(const Shape& sizes, const Shape& strides, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast && sizes.size() != 4) return false;
  Shape expected = strides_for(sizes, format);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != 1 && strides[i] != expected[i]) return false;
  }
  return true;
}

}  // namespace loom
