// File: tests/testing.h
// Shared test helpers: closeness checks that print where tensors differ, and
// error checks that look at the message, not just the type.
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/numerics.h"
#include "core/tensor.h"

namespace loom::testing {

// The GPU the GPU tests run on: cuda:k for LOOM_TEST_DEVICE=k (default 0). Run
// with LOOM_TEST_DEVICE=1 on a host with two GPUs, every GPU test checks that
// nothing assumes GPU 0: the thread's current device stays cuda:0 while the
// tensors live on cuda:1. A value that is no GPU index throws ValueError.
Device test_gpu();
// Whether test_gpu() exists on this machine (GPU test cases are skipped otherwise).
bool test_gpu_available();

// |actual - expected| <= atol + rtol * |expected| everywhere, same shape, NaN
// never equal. Returns "" when close, else a report: shape, max abs error and
// the first mismatching elements.
std::string close_report(const Tensor& actual, const Tensor& expected, double rtol, double atol);

// Row-major values of a tensor as doubles (any dtype, any device).
std::vector<double> values(const Tensor& tensor);

// The extremes, mean and population variance of a tensor's values (any dtype, any device): what
// the tests of random draws check. A tensor without elements has NaN moments.
struct Moments {
  double min, max, mean, var;
};
Moments moments(const Tensor& tensor);

// Normal float32 CPU values, each exact in `dtype` (rounded to it on the test GPU), so that every
// precision sees the same inputs and a float64 reference computes on exactly those values.
Tensor exact_randn(const Shape& sizes, DType dtype, Generator& gen);

// A precision policy of the fusion GPU parity tests and its tolerances for
// normalized_error (forward, gradients). strict: conv/matmul in IEEE fp32;
// tf32: tensor cores (10-bit mantissa); bf16: operands rounded to 8 bits, so
// errors of a few 1e-2 of the largest value.
struct ParityPolicy {
  const char* name;
  Precision precision;
  bool bf16;  // under AutocastGuard(bfloat16)
  double fwd, bwd;
};
inline constexpr ParityPolicy kStrictFp32Parity{"strict_fp32", Precision::StrictFp32, false, 1e-5, 1e-4};
inline constexpr ParityPolicy kTf32Parity{"tf32", Precision::Tf32, false, 5e-3, 1e-2};
inline constexpr ParityPolicy kBf16Parity{"bf16", Precision::Bf16, true, 5e-2, 8e-2};
inline constexpr MemoryFormat kParityLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};

// max |actual - expected| / max(max |expected|, 1): the GPU parity tests' error,
// relative to the reference's scale; infinite where an element is NaN.
double normalized_error(const Tensor& actual, const Tensor& expected);

// Under tf32 and bf16 a pre-activation near a kink (relu's 0, hardtanh's +-1,
// relu6's 6) can land on the other side of it than on the CPU: that element's
// derivative flips, which moves one row of dx (the image or sample holding it),
// one filter or row of dweight and one bias element. Away from zero the
// rounding is coarse (bf16 rounds values near 1 by up to 2^-9), so flips are
// likelier: an unfused bf16 linear + hardtanh with 768 pre-activations around
// +-1 moved more than one row of its weight gradient (H200). True when the
// elements off by more than `tol` (normalized as above) stay within two slices
// along dim 0 or 2% of the tensor, whichever is more: such decision flips pass.
bool decision_flips(const Tensor& actual, const Tensor& expected, double tol);

// Sets an environment variable (a LOOM_* switch that forces a path) until the
// guard ends, then restores its earlier value, or unsets it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

// CHECKs |actual - expected| <= tol * max |expected| everywhere (both read as
// float64 on the CPU): the direct kernels' tests, whose error grows with the
// reference's magnitude.
void check_scaled(const Tensor& actual, const Tensor& expected, double tol);

}  // namespace loom::testing

// CHECK that two tensors are close, printing the report on failure.
#define CHECK_CLOSE(actual, expected, rtol, atol)                                      \
  do {                                                                                 \
    std::string loom_report_ = loom::testing::close_report(actual, expected, rtol, atol); \
    CHECK_MESSAGE(loom_report_.empty(), loom_report_);                                  \
  } while (0)

// CHECK that `expr` throws `Kind` whose message contains `fragment`.
#define CHECK_THROWS_WITH_FRAGMENT(expr, Kind, fragment)                        \
  do {                                                                          \
    bool loom_thrown_ = false;                                                  \
    try {                                                                       \
      (void)(expr);                                                             \
    } catch (const Kind& e) {                                                   \
      loom_thrown_ = true;                                                      \
      CHECK_MESSAGE(std::string(e.what()).find(fragment) != std::string::npos,  \
                    "message was: " << std::string(e.what()) << "\nexpected to contain: " << fragment); \
    }                                                                           \
    CHECK_MESSAGE(loom_thrown_, #expr " did not throw " #Kind);                 \
  } while (0)

// A test case that runs only where the test GPU (test_gpu()) is usable
// (skipped, not failed, elsewhere).
#define LOOM_GPU_TEST_CASE(name) \
  TEST_CASE(name * doctest::skip(!loom::testing::test_gpu_available()))
// The same with a fixture: its members are in scope in the body, and it is
// constructed only where the case runs.
#define LOOM_GPU_TEST_CASE_FIXTURE(fixture, name) \
  TEST_CASE_FIXTURE(fixture, name * doctest::skip(!loom::testing::test_gpu_available()))
