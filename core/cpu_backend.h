// File: core/cpu_backend.h
// Which tier runs the CPU's ops, as cuDNN and Loom's kernels are tiers on the
// GPU: oneDNN (core/onednn, the default) or the reference kernels (core/cpu),
// which stay the oracle of every test and run whatever oneDNN declines
// (float64, shapes it has no implementation for).
//
//   LOOM_CPU_BACKEND=reference ./train     // or onednn (the default)
//   loom::CpuBackendGuard reference(loom::CpuBackend::Reference);  // in a test
#pragma once

#include <string_view>

namespace loom {

enum class CpuBackend { Reference, Onednn };

// The tier in force: set_cpu_backend's, else LOOM_CPU_BACKEND's (read at the
// first call; throws ValueError for another value), else oneDNN.
CpuBackend cpu_backend();
void set_cpu_backend(CpuBackend backend);

// Whether the user named the tier (LOOM_CPU_BACKEND or set_cpu_backend): a
// named oneDNN that cannot load is an error, a default one falls back to the
// reference kernels with a warning.
bool cpu_backend_named();

std::string_view cpu_backend_name(CpuBackend backend);  // "reference", "onednn"

// Sets the tier for its lifetime, restoring the previous one after.
class CpuBackendGuard {
 public:
  explicit CpuBackendGuard(CpuBackend backend);
  ~CpuBackendGuard();
  CpuBackendGuard(const CpuBackendGuard&) = delete;
  CpuBackendGuard& operator=(const CpuBackendGuard&) = delete;

 private:
  CpuBackend previous_;
  bool previous_named_;
};

}  // namespace loom
