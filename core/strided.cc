// File: core/strided.cc
#include "core/strided.h"

#include "core/error.h"

namespace loom {

void throw_element_mismatch(DType actual, DType requested) {
  throw TypeError(fmt::format("[Strided::ptr] a view of {} elements was read as {}: a kernel was handed a tensor "
                              "of another dtype than it computes in; convert the tensor with .to(DType) before the "
                              "kernel",
                              dtype_name(actual), dtype_name(requested)));
}

}  // namespace loom
