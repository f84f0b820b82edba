// File: core/onednn/tier.cc
// Whether the oneDNN tier runs (tier.h): the CPU tier setting and the library's load.
#include "core/onednn/tier.h"

#include <cstdio>
#include <mutex>

#include "core/cpu_backend.h"
#include "core/error.h"
#include "core/onednn/library.h"

namespace loom::onednn {

bool active() {
  if (cpu_backend() != CpuBackend::Onednn) return false;
  if (library() != nullptr) return true;
  LOOM_CHECK(!cpu_backend_named(), Error,
             "[onednn] LOOM_CPU_BACKEND=onednn, but oneDNN did not load ({}); install Debian's "
             "libdnnl2 (tools/setup.sh does) or set LOOM_CPU_BACKEND=reference",
             load_failure());
  static std::once_flag warned;
  std::call_once(warned, [] {
    std::fprintf(stderr,
                 "loom: oneDNN did not load (%s); the CPU runs the reference kernels (install "
                 "Debian's libdnnl2 for the fast tier)\n",
                 load_failure().c_str());
  });
  return false;
}

bool takes(DType dtype) { return dtype == DType::Float32 && active(); }

}  // namespace loom::onednn
