// File: core/kernel/reduce.h
// Which reduction a kernel computes, shared by the CPU and CUDA reductions.
#pragma once

namespace loom::kernel {

enum class ReduceOp { Sum, Mean, Max, Min };

}  // namespace loom::kernel
