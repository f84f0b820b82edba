// File: core/cpu_backend.cc
// The CPU tier setting (cpu_backend.h): LOOM_CPU_BACKEND, then set_cpu_backend.
#include "core/cpu_backend.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace loom {
namespace {

struct Setting {
  std::atomic<CpuBackend> backend;
  std::atomic<bool> named;
};

Setting& setting() {
  static Setting s = [] {
    const char* text = std::getenv("LOOM_CPU_BACKEND");
    if (text == nullptr || *text == '\0') return Setting{CpuBackend::Onednn, false};
    const std::string value = text;
    LOOM_CHECK(value == "onednn" || value == "reference", ValueError,
               "[cpu_backend] LOOM_CPU_BACKEND must be onednn or reference, got '{}'", value);
    return Setting{value == "onednn" ? CpuBackend::Onednn : CpuBackend::Reference, true};
  }();
  return s;
}

}  // namespace

CpuBackend cpu_backend() { return setting().backend.load(); }

void set_cpu_backend(CpuBackend backend) {
  setting().backend = backend;
  setting().named = true;
}

bool cpu_backend_named() { return setting().named.load(); }

std::string_view cpu_backend_name(CpuBackend backend) {
  return backend == CpuBackend::Onednn ? "onednn" : "reference";
}

CpuBackendGuard::CpuBackendGuard(CpuBackend backend)
    : previous_(cpu_backend()), previous_named_(cpu_backend_named()) {
  set_cpu_backend(backend);
}

CpuBackendGuard::~CpuBackendGuard() {
  setting().backend = previous_;
  setting().named = previous_named_;
}

}  // namespace loom
