// File: core/cuda/scratch.cc
#include "core/cuda/scratch.h"

#include "core/error.h"

namespace loom::cuda {

void check_scratch(std::string_view op, const Strided& scratch, const Scratch& need) {
  LOOM_CHECK(scratch.dtype == need.dtype && scratch.numel() >= need.elements, ValueError,
             "[{}] the scratch must hold {} {} elements; got {} of {} (ask the op's *_scratch function)", op,
             need.elements, dtype_name(need.dtype), scratch.numel(), dtype_name(scratch.dtype));
}

}  // namespace loom::cuda
