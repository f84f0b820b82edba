// File: core/kernel/reduce.h
// Which reduction or running (scan) reduction a kernel computes, shared by the
// CPU and CUDA kernels.
#pragma once

namespace loom::kernel {

enum class ReduceOp { Sum, Mean, Max, Min, Prod };

// cumsum and cumprod.
enum class ScanOp { Sum, Prod };

}  // namespace loom::kernel
