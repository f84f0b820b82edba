// File: core/cpu/openblas.h
// OpenBLAS, loaded at its first use rather than linked. OpenBLAS picks its
// kernels once, while it loads, from the CPU's model number; a model newer than
// the library knows (Debian 12's 0.3.21 on an Emerald Rapids Xeon, model 207)
// or hidden by a virtual machine gets its generic SSE3 kernels ("Prescott"),
// which ran Loom's CPU training steps 2-2.5x slower. Loading it late lets Loom
// first name the kernels the CPU's features allow (OPENBLAS_CORETYPE, unless
// the user set it) and ask for one thread (OPENBLAS_NUM_THREADS: Loom's pool
// owns the cores).
#pragma once

#include <cblas.h>

#include <string>

namespace loom::cpu {

struct Openblas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  std::string core;  // the kernels OpenBLAS chose, as openblas_get_corename() names them
};

// Loads libopenblas.so.0 once (thread-safe) and returns its entry points;
// throws loom::Error naming the package to install when it cannot be loaded.
const Openblas& openblas();

// The OPENBLAS_CORETYPE that the CPU's features allow: "SkylakeX" (AVX-512 F,
// CD, BW, DQ, VL), "Haswell" (AVX2 and FMA), "Sandybridge" (AVX), or "" (leave
// OpenBLAS's own choice).
std::string openblas_core_for_cpu();

}  // namespace loom::cpu
