// File: core/numerics.h
// The numerics policy: how GPU convolutions and matrix products may compute.
// It is part of every cuDNN plan-cache key. The CPU reference backend always
// computes in the tensors' own precision and ignores it.
//
//   loom::NumericsGuard strict({.precision = loom::Precision::StrictFp32});
#pragma once

#include <cstdint>
#include <string_view>

namespace loom {

enum class Precision : uint8_t {
  StrictFp32,  // IEEE fp32 math: no TF32 tensor cores, no down-conversion
  Tf32,        // fp32 tensors, TF32 tensor-core math (PyTorch's default for convolutions)
  Bf16,        // bf16 compute with fp32 accumulation (mixed precision)
  Fp16,        // fp16 compute with fp32 accumulation (mixed precision)
};

struct NumericsPolicy {
  Precision precision = Precision::Tf32;
  bool deterministic = false;  // exclude engines cuDNN marks NONDETERMINISTIC
  bool autotune = false;       // time the top candidate plans and keep the fastest

  bool operator==(const NumericsPolicy&) const = default;
};

std::string_view precision_name(Precision precision);  // "strict_fp32", "tf32", ...

// The calling thread's policy.
const NumericsPolicy& numerics_policy();
void set_numerics_policy(const NumericsPolicy& policy);

// Sets a policy for its lifetime, restoring the previous one after.
class NumericsGuard {
 public:
  explicit NumericsGuard(const NumericsPolicy& policy);
  ~NumericsGuard();
  NumericsGuard(const NumericsGuard&) = delete;
  NumericsGuard& operator=(const NumericsGuard&) = delete;

 private:
  NumericsPolicy previous_;
};

}  // namespace loom
