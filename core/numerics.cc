#include "core/numerics.h"

namespace loom {

namespace {
thread_local NumericsPolicy current_policy;
}  // namespace

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::StrictFp32: return "strict_fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

const NumericsPolicy& numerics_policy() { return current_policy; }
void set_numerics_policy(const NumericsPolicy& policy) { current_policy = policy; }

NumericsGuard::NumericsGuard(const NumericsPolicy& policy) : previous_(current_policy) {
  current_policy = policy;
}
NumericsGuard::~NumericsGuard() { current_policy = previous_; }

}  // namespace loom
