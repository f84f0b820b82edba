// File: core/autocast.cc
// The thread's autocast dtype and the per-operand cast the autocast ops share.
#include "core/autocast.h"

#include "core/error.h"

namespace loom {

namespace {
thread_local std::optional<DType> current_dtype;
}  // namespace

std::optional<DType> autocast_dtype() { return current_dtype; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(current_dtype) {
  LOOM_CHECK(!dtype || *dtype == DType::BFloat16 || *dtype == DType::Float16, ValueError,
             "[autocast] computes in bfloat16 or float16, got {}; use DType::BFloat16 (or "
             "nullopt to turn autocast off)",
             dtype_name(*dtype));
  current_dtype = dtype;
}

AutocastGuard::~AutocastGuard() { current_dtype = previous_; }

Tensor autocast_operand(const Tensor& t) {
  if (!current_dtype || !t.defined() || !t.device().is_cuda() || !is_floating(t.dtype())) return t;
  return t.to(*current_dtype);
}

}  // namespace loom
