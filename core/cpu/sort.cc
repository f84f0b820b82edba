// File: core/cpu/sort.cc
// Row sorts (std::stable_sort of positions, rows in parallel) and running sums
// (one sequential pass per line along the dim).
#include "core/cpu/sort.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "core/cpu/loop.h"
#include "core/dtype.h"
#include "core/parallel.h"

namespace loom::cpu {

namespace {

// a before b in ascending order: NaN after every number, -0 equal to +0 (the
// comparison of doubles already treats them as equal). Every dtype's values
// are exact in double except int64's beyond 2^53, which compare as themselves.
template <class T>
bool ascending_less(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return a < b;
  } else {
    const double x = to_double(a), y = to_double(b);
    return !std::isnan(x) && (std::isnan(y) || x < y);
  }
}

template <class T>
void sort_typed(int64_t* indices, const T* keys, int64_t rows, int64_t n, bool descending) {
  parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t* order = indices + r * n;
      const T* row = keys + r * n;
      std::iota(order, order + n, int64_t{0});
      // Descending keeps equal keys in their order too, so it swaps the
      // operands rather than reversing an ascending result.
      std::stable_sort(order, order + n, [&](int64_t i, int64_t j) {
        return descending ? ascending_less(row[j], row[i]) : ascending_less(row[i], row[j]);
      });
    }
  });
}

}  // namespace

void sort_rows(const Strided& indices, const Strided& keys, bool descending) {
  const int64_t n = keys.sizes.empty() ? 1 : keys.sizes.back();
  const int64_t rows = n == 0 ? 0 : keys.numel() / n;
  visit_dtype(keys.dtype, [&]<class T>() {
    sort_typed(indices.ptr<int64_t>(), keys.ptr<const T>(), rows, n, descending);
  });
}

void cumsum_along(const Strided& out, const Strided& in, int64_t dim, bool reverse) {
  if (in.numel() == 0) return;
  Shape lines = in.sizes;
  const int64_t n = lines[dim];
  lines[dim] = 1;
  const int64_t in_step = in.strides[dim], out_step = out.strides[dim];
  const int64_t first = reverse ? n - 1 : 0, step = reverse ? -1 : 1;
  visit_arithmetic(in.dtype, [&]<class T>() {
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    for_each_offset<2>(lines, {&out.strides, &in.strides}, [&](const auto& o) {
      T total = T(0);
      for (int64_t k = 0, i = first; k < n; ++k, i += step) {
        if constexpr (std::is_integral_v<T>) {
          // Integer sums wrap around: added in the unsigned type of the same width.
          using U = std::make_unsigned_t<T>;
          total = static_cast<T>(static_cast<U>(total) + static_cast<U>(x[o[1] + i * in_step]));
        } else {
          total += x[o[1] + i * in_step];
        }
        y[o[0] + i * out_step] = total;
      }
    });
  });
}

}  // namespace loom::cpu
