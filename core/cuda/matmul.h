// File: core/cuda/matmul.h
// Matrix products on the GPU through cuBLAS (blas.h), with exactly the
// semantics of cpu::matmul (core/cpu/gemm.h). No CUDA types, so core/ops
// includes it in every build.
//
// M, N, K: C (M, N) = A (M, K) . B (K, N); "batch" is any number of leading dims.
#pragma once

#include "core/strided.h"

namespace loom::cuda {

// c (batch, M, N) = a (batch, M, K) . b (batch, K, N), or c += a . b when
// `accumulate`, as cpu::matmul: one float dtype, one batch shape, batch dims of
// any strides (0 for broadcast operands); with `accumulate`, products over a
// batch dim along which c repeats (stride 0) are summed into it.
//
// Plain and transposed matrices go to cuBLAS as they are, a batch through one
// strided-batched call where the strides allow. Unlike cpu::matmul, operands
// that fail cpu::is_blas_matrix are accepted too: they are copied to dense
// temporaries first.
//
// float32 computes as the thread's numerics policy says: StrictFp32 in IEEE
// fp32 (pedantic math, no tensor-core down-conversion), Tf32 / Bf16 / Fp16 on
// tensor cores from inputs rounded to that format, accumulating in fp32.
// float64 always computes in fp64. bfloat16 and float16 (GPU-only dtypes)
// read and write 16-bit matrices and accumulate in fp32 under every policy;
// with `accumulate`, c's old values are read at that precision too.
void matmul(const Strided& c, const Strided& a, const Strided& b, bool accumulate = false);

}  // namespace loom::cuda
