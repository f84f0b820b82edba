// File: core/cpu/rnn.cc
// The recurrent step's pointwise loops: core/kernel/rnn.h's units for every
// (sample, hidden unit).
#include "core/cpu/rnn.h"

#include <type_traits>

#include "core/dtype.h"

namespace loom::cpu {

namespace {

// Loom's 16-bit types convert through float.
struct Convert {
  template <class C, class T>
  static C in(const T& value) {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      return static_cast<C>(static_cast<float>(value));
    } else {
      return static_cast<C>(value);
    }
  }
  template <class T, class C>
  static T out(C value) {
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      return T(static_cast<float>(value));
    } else {
      return static_cast<T>(value);
    }
  }
};

template <bool Forward>
void each_unit(const kernel::RnnStep& step, DType dtype) {
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float> || std::is_same_v<T, BFloat16> ||
                  std::is_same_v<T, Half>) {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const kernel::RnnRows<T> rows = kernel::rnn_rows<T>(step);
      const int64_t samples = (Forward ? step.gx : step.dh).sizes[0];
      for (int64_t n = 0; n < samples; ++n) {
        for (int64_t j = 0; j < step.hidden; ++j) {
          if constexpr (Forward) {
            kernel::rnn_forward_unit<C, Convert>(rows, n, j);
          } else {
            kernel::rnn_backward_unit<C, Convert>(rows, n, j);
          }
        }
      }
    } else {
      throw_no_kernel("cpu", "a floating dtype", dtype);
    }
  });
}

}  // namespace

void rnn_step_forward(const kernel::RnnStep& step) { each_unit<true>(step, step.gx.dtype); }

void rnn_step_backward(const kernel::RnnStep& step) { each_unit<false>(step, step.dh.dtype); }

}  // namespace loom::cpu
