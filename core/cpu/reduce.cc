// File: core/cpu/reduce.cc
// CPU reductions (sum, mean, max, min, prod) over the dims the output keeps at size 1, in double.
#include "core/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/loop.h"

namespace loom::cpu {

namespace {

// Strides that send every input index to its output element: 0 on reduced dims.
Shape output_strides_over_input(const Strided& out, const Strided& in) {
  Shape strides(in.sizes.size());
  for (size_t d = 0; d < in.sizes.size(); ++d) {
    strides[d] = out.sizes[d] == in.sizes[d] ? out.strides[d] : 0;
  }
  return strides;
}

// Output elements in row-major order of out.sizes, as offsets into out.
std::vector<int64_t> output_offsets(const Strided& out) {
  std::vector<int64_t> offsets;
  offsets.reserve(out.numel());
  for_each_offset<1>(out.sizes, {&out.strides}, [&](const auto& o) { offsets.push_back(o[0]); });
  return offsets;
}

// reduce's element type. Besides float32 and float64 it takes bfloat16 and
// float16, which the CPU computes nothing in but whose views' gradients it sums
// (expand's backward): read into double, rounded once when stored.
template <class Fn>
void visit_summed(DType dtype, Fn&& fn) {
  if (dtype == DType::BFloat16) return fn.template operator()<BFloat16>();
  if (dtype == DType::Float16) return fn.template operator()<Half>();
  visit_float(dtype, fn);
}

}  // namespace

void reduce(const Strided& out, const Strided& in, kernel::ReduceOp op) {
  // A dense scratch of doubles indexed like `out`, filled in one pass over `in`.
  Strided dense{nullptr, DType::Float64, out.sizes, contiguous_strides(out.sizes)};
  Shape to_dense = output_strides_over_input(dense, in);
  double init = op == kernel::ReduceOp::Max    ? -std::numeric_limits<double>::infinity()
                : op == kernel::ReduceOp::Min  ? std::numeric_limits<double>::infinity()
                : op == kernel::ReduceOp::Prod ? 1.0
                                               : 0.0;
  std::vector<double> acc(out.numel(), init);
  visit_summed(in.dtype, [&]<class T>() {
    const T* x = in.ptr<T>();
    for_each_offset<2>(in.sizes, {&in.strides, &to_dense}, [&](const auto& o) {
      double v = to_double(x[o[0]]);
      double& a = acc[o[1]];
      switch (op) {
        case kernel::ReduceOp::Sum:
        case kernel::ReduceOp::Mean: a += v; break;
        case kernel::ReduceOp::Max: a = (std::isnan(v) || v > a) ? v : a; break;
        case kernel::ReduceOp::Min: a = (std::isnan(v) || v < a) ? v : a; break;
        case kernel::ReduceOp::Prod: a *= v; break;
      }
    });
    double count = in.numel() == 0 ? 0.0 : static_cast<double>(in.numel()) / std::max<int64_t>(out.numel(), 1);
    std::vector<int64_t> offsets = output_offsets(out);
    T* y = out.ptr<T>();
    for (size_t i = 0; i < offsets.size(); ++i) {
      double v = op == kernel::ReduceOp::Mean ? acc[i] / count : acc[i];
      y[offsets[i]] = from_double<T>(v);
    }
  });
}

void max_along(const Strided& values, const Strided& indices, const Strided& in, int64_t dim) {
  visit_float(in.dtype, [&]<class T>() {
    const T* x = in.ptr<T>();
    T* v = values.ptr<T>();
    int64_t* idx = indices.ptr<int64_t>();
    int64_t n = in.sizes[dim], step = in.strides[dim];
    // Walk the output positions; `in` offsets follow the same index with dim fixed at 0.
    Shape in_strides = in.strides;
    for_each_offset<3>(values.sizes, {&values.strides, &indices.strides, &in_strides},
                       [&](const auto& o) {
                         int64_t best = 0;
                         T best_value = x[o[2]];
                         for (int64_t i = 1; i < n && !std::isnan(best_value); ++i) {
                           T candidate = x[o[2] + i * step];
                           if (candidate > best_value || std::isnan(candidate)) {
                             best = i;
                             best_value = candidate;
                           }
                         }
                         v[o[0]] = best_value;
                         idx[o[1]] = best;
                       });
  });
}

}  // namespace loom::cpu

namespace loom::cpu {

void scatter_add_along(const Strided& dx, const Strided& dy, const Strided& indices, int64_t dim) {
  visit_float(dx.dtype, [&]<class T>() {
    T* g = dx.ptr<T>();
    const T* pdy = dy.ptr<T>();
    const int64_t* idx = indices.ptr<int64_t>();
    int64_t step = dx.strides[dim];
    for_each_offset<3>(dy.sizes, {&dy.strides, &indices.strides, &dx.strides}, [&](const auto& o) {
      g[o[2] + idx[o[1]] * step] += pdy[o[0]];
    });
  });
}

}  // namespace loom::cpu
