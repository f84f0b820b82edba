// File: core/cpu/sort.cc
// Row sorts (std::stable_sort of positions, rows in parallel) and running sums
// and products (one sequential pass per line along the dim).
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

// The type a running sum or product combines in: an unsigned type at least as
// wide as unsigned int for integers, else the dtype's own.
template <class T>
struct ScanOf {
  using type = T;
};
template <class T>
  requires std::is_integral_v<T>
struct ScanOf<T> {
  using type = std::make_unsigned_t<std::common_type_t<T, unsigned>>;
};

}  // namespace

void sort_rows(const Strided& indices, const Strided& keys, bool descending) {
  const int64_t n = keys.sizes.empty() ? 1 : keys.sizes.back();
  const int64_t rows = n == 0 ? 0 : keys.numel() / n;
  visit_dtype(keys.dtype, [&]<class T>() {
    sort_typed(indices.ptr<int64_t>(), keys.ptr<const T>(), rows, n, descending);
  });
}

void scan_along(const Strided& out, const Strided& in, int64_t dim, kernel::ScanOp op, bool reverse) {
  if (in.numel() == 0) return;
  Shape lines = in.sizes;
  const int64_t n = lines[dim];
  lines[dim] = 1;
  const int64_t in_step = in.strides[dim], out_step = out.strides[dim];
  const int64_t first = reverse ? n - 1 : 0, step = reverse ? -1 : 1;
  const bool product = op == kernel::ScanOp::Prod;
  visit_arithmetic(in.dtype, [&]<class T>() {
    const T* x = in.ptr<const T>();
    T* y = out.ptr<T>();
    // Integers wrap around: they combine in the unsigned type of their width
    // (uint8 in unsigned int, so the product is taken before the wrap).
    using Acc = typename ScanOf<T>::type;
    for_each_offset<2>(lines, {&out.strides, &in.strides}, [&](const auto& o) {
      Acc total = product ? Acc(1) : Acc(0);
      for (int64_t k = 0, i = first; k < n; ++k, i += step) {
        const Acc value = static_cast<Acc>(x[o[1] + i * in_step]);
        total = product ? static_cast<Acc>(total * value) : static_cast<Acc>(total + value);
        y[o[0] + i * out_step] = static_cast<T>(total);
      }
    });
  });
}

}  // namespace loom::cpu
