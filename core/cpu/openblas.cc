// File: core/cpu/openblas.cc
// See openblas.h: the run-time load, and the kernel choice made before it.
#include "core/cpu/openblas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace loom::cpu {
namespace {

using SetNumThreads = void (*)(int);
using GetCorename = char* (*)();

// The library's symbol; a loom::Error naming it where the library lacks it.
void* symbol(void* library, const char* name) {
  void* found = dlsym(library, name);
  LOOM_CHECK(found != nullptr, Error,
             "[openblas] libopenblas.so.0 has no symbol {}; install Debian's libopenblas0 "
             "(tools/setup.sh does)",
             name);
  return found;
}

// Sets the variable unless the user has: OpenBLAS reads it once, while it loads.
void default_env(const char* name, const std::string& value) {
  if (!value.empty()) setenv(name, value.c_str(), /*overwrite=*/0);
}

Openblas load() {
  default_env("OPENBLAS_CORETYPE", openblas_core_for_cpu());
  default_env("OPENBLAS_NUM_THREADS", "1");
  void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL);
  LOOM_CHECK(library != nullptr, Error,
             "[openblas] the CPU backend's matrix products need OpenBLAS, which did not load ({}); "
             "install Debian's libopenblas0 (tools/setup.sh does)",
             dlerror());
  Openblas blas;
  blas.sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(symbol(library, "cblas_sgemm"));
  blas.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(symbol(library, "cblas_dgemm"));
  // One thread whatever OPENBLAS_NUM_THREADS says: Loom's pool owns the cores,
  // and OpenBLAS's own threads would spin on sched_yield while Loom's kernels run.
  reinterpret_cast<SetNumThreads>(symbol(library, "openblas_set_num_threads"))(1);
  blas.core = reinterpret_cast<GetCorename>(symbol(library, "openblas_get_corename"))();
  return blas;
}

}  // namespace

std::string openblas_core_for_cpu() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
  return "";
}

const Openblas& openblas() {
  static const Openblas loaded = load();
  return loaded;
}

}  // namespace loom::cpu
