// File: core/numerics.h
// The numerics policy: how GPU convolutions and matrix products may compute.
// It is part of every cuDNN plan-cache key. The CPU reference backend always
// computes in the tensors' own precision and ignores it.
//
//   loom::NumericsGuard strict({.precision = loom::Precision::StrictFp32});
#pragma once

#include <cstdint>
#include <optional>
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

// When cuDNN plans are built. Process-wide (background builders read it too)
// and not part of the plan key: lazy and eager end at the same plan, so they
// share plan files.
enum class PlanBuildMode : uint8_t {
  Lazy,         // run at once on an engine that needs no runtime compilation (or the
                // tier below cuDNN); build the best plan on background threads and
                // swap it in at a step boundary (cudnn::apply_pending_plans)
  Eager,        // build the best plan before the first run (the first step waits)
  Precompiled,  // never use engines that compile at run time (RUNTIME_COMPILATION)
};

std::string_view plan_build_mode_name(PlanBuildMode mode);  // "lazy", "eager", "precompiled"
// "lazy" -> Lazy, ...; nullopt for anything else.
std::optional<PlanBuildMode> parse_plan_build_mode(std::string_view text);

// LOOM_CUDNN_PLAN_BUILD=lazy|eager|precompiled sets the initial mode (lazy when
// unset); an unknown value is a ValueError at first use, naming the choices.
PlanBuildMode plan_build_mode();
void set_plan_build_mode(PlanBuildMode mode);

// Sets the plan-build mode for its lifetime, restoring the previous one after.
class PlanBuildGuard {
 public:
  explicit PlanBuildGuard(PlanBuildMode mode) : previous_(plan_build_mode()) { set_plan_build_mode(mode); }
  ~PlanBuildGuard() { set_plan_build_mode(previous_); }
  PlanBuildGuard(const PlanBuildGuard&) = delete;
  PlanBuildGuard& operator=(const PlanBuildGuard&) = delete;

 private:
  PlanBuildMode previous_;
};

}  // namespace loom
