// File: tests/core/ops/parity_sweep_test.cc
// The CPU subset of the randomized parity sweep (parity_sweep.h): float32 CPU
// kernels against float64 on the same random configurations the GPU sweep
// draws, at the strict tolerance. Reproducible by case number.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops/ops.h"
#include "tests/core/ops/parity_sweep.h"

using namespace loom;

TEST_CASE("random configurations: float32 on the CPU matches float64") {
  sweep::Summary summary =
      sweep::run_sweep(Device::cpu(), {Precision::StrictFp32}, /*default_seeds=*/{1}, /*count=*/300);
  CHECK(summary.failures() == 0);
}

TEST_CASE("a case is the same configuration every time it is drawn") {
  const sweep::Case a = sweep::make_case(3, 41, {Precision::StrictFp32, Precision::Tf32});
  const sweep::Case b = sweep::make_case(3, 41, {Precision::StrictFp32, Precision::Tf32});
  CHECK(a.describe() == b.describe());
  CHECK(a.describe() != sweep::make_case(3, 42, {Precision::StrictFp32}).describe());
}

TEST_CASE("the comparison catches wrong values, NaN and shape mismatches") {
  Tensor ref = arange(0, 12, 1, {.dtype = DType::Float64}).reshape({3, 4});
  CHECK(sweep::relative_error(ref, ref) == 0);
  Tensor off = ref.clone();
  off.data_ptr<double>()[5] += 0.011;  // 1e-3 of the largest value, 11
  CHECK(sweep::relative_error(off, ref) == doctest::Approx(1e-3));
  off.data_ptr<double>()[5] = NAN;
  CHECK(sweep::relative_error(off, ref) == INFINITY);
  CHECK(sweep::relative_error(ref.reshape({4, 3}), ref) == INFINITY);
  // Values that cancel to ~0 are judged against the floor, not their own size.
  Tensor tiny = zeros({2}, {.dtype = DType::Float64});
  Tensor near = full({2}, 1e-9, {.dtype = DType::Float64});
  CHECK(sweep::relative_error(near, tiny) == doctest::Approx(1e-6));
  CHECK(sweep::relative_error(near, tiny, 1e-2) == doctest::Approx(1e-7));
}
