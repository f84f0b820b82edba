// File: tests/testing_test.cc
// The GPU parity tests' shared measures, on tensors with known answers:
// normalized_error and decision_flips.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/tensor.h"
#include "tests/testing.h"

namespace loom::testing {
namespace {

TEST_CASE("normalized_error: the largest difference over the reference's scale, never below 1") {
  CHECK(normalized_error(tensor({4.5, -2, 1}, {3}), tensor({4, -2, 1}, {3})) == doctest::Approx(0.125));
  CHECK(normalized_error(tensor({0.1, 0}, {2}), tensor({0, 0}, {2})) == doctest::Approx(0.1));
  CHECK(std::isinf(normalized_error(tensor({NAN, 0}, {2}), tensor({0, 0}, {2}))));
}

TEST_CASE("decision_flips: errors within two dim-0 slices or 2% pass, more do not") {
  const Tensor expected = tensor(std::vector<double>(40, 0.0), {4, 10});  // a slice is 10 of 40
  std::vector<double> two_slices(40, 0.0), beyond(40, 0.0);
  for (int i = 0; i < 20; ++i) two_slices[i] = 1;
  for (int i = 0; i < 21; ++i) beyond[i] = 1;
  CHECK(decision_flips(tensor(two_slices, {4, 10}), expected, 0.5));
  CHECK_FALSE(decision_flips(tensor(beyond, {4, 10}), expected, 0.5));
  CHECK(decision_flips(tensor(beyond, {4, 10}), expected, 2.0));  // within tol: nothing is off
}

}  // namespace
}  // namespace loom::testing
