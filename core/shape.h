// File: core/shape.h
// Sizes and strides, in elements. Logical dims of images are always N, C, H, W;
// the memory layout lives only in the strides, as cuDNN sees tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

using Shape = std::vector<int64_t>;

enum class MemoryFormat : uint8_t {
  Contiguous,    // row-major: NCHW for 4-D
  ChannelsLast,  // NHWC in memory, dims still N, C, H, W (4-D only)
  Preserve,      // keep the layout of the source
};

std::string_view memory_format_name(MemoryFormat format);

int64_t numel_of(const Shape& sizes);
// element_bytes times the product of the sizes with zeros counted as 1 (what
// the strides multiply), or nothing when that overflows int64 or a size is
// negative. A shape whose span fits has strides and byte sizes that fit too.
std::optional<int64_t> checked_span(const Shape& sizes, int64_t element_bytes);
// Throws ValueError naming `op` when checked_span(sizes, 1) is empty.
void check_span(const Shape& sizes, std::string_view op);
// Both throw ValueError for a shape whose strides overflow (see check_span).
Shape contiguous_strides(const Shape& sizes);
Shape channels_last_strides(const Shape& sizes);  // sizes must be 4-D
Shape strides_for(const Shape& sizes, MemoryFormat format);

// "(8, 3, 32, 32)"
std::string shape_str(const Shape& sizes);

// The index of row-major element `flat` of a tensor of `sizes`.
Shape unravel_index(const Shape& sizes, int64_t flat);
// Element `flat`'s position as error messages write it: "3" in a 1-D tensor, else "(0, 2, 1)".
std::string position_str(const Shape& sizes, int64_t flat);

// Maps a possibly negative dim into [0, ndim); throws IndexError naming `op`.
int64_t normalize_dim(int64_t dim, int64_t ndim, std::string_view op);

// NumPy broadcasting of two shapes; throws ShapeError naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// True when strides describe the given layout. Size-1 dims may have any stride,
// as in PyTorch, so a (N,1,H,W) tensor can be both NCHW and NHWC.
bool has_layout(const Shape& sizes, const Shape& strides, MemoryFormat format);

}  // namespace loom
