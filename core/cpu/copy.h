// File: core/cpu/copy.h
// Strided copies with dtype conversion, and fills.
#pragma once

#include "core/strided.h"

namespace loom::cpu {

// dst[i] = convert(src[i]) for every index; same sizes, any strides and dtypes.
void copy(const Strided& dst, const Strided& src);

// dst[i] = value, converted to dst's dtype.
void fill(const Strided& dst, double value);

}  // namespace loom::cpu
