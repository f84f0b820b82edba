// File: tests/training/epoch_tally_test.cc
// The trainer's epoch tally: the loss is the mean over every image of every
// batch (weighted by batch size, non-finite losses left out), the accuracy
// counts every prediction, and reads in slices add up to one read at the end.
// B batch, K = 3 classes.
#include "training/epoch_tally.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// Logits (B, 3) whose argmax is each of `classes`.
Tensor logits_for(const std::vector<int64_t>& classes) {
  Tensor logits = zeros({static_cast<int64_t>(classes.size()), 3});
  for (size_t i = 0; i < classes.size(); ++i) {
    logits.narrow(0, static_cast<int64_t>(i), 1).narrow(1, classes[i], 1).fill_(1.0);
  }
  return logits;
}

Tensor labels(const std::vector<double>& values) {
  return tensor(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::Int64});
}

void add_batches(training::EpochTally& tally, double third_loss) {
  tally.add(full({}, 2.0), logits_for({0, 1, 2, 0}), labels({0, 1, 1, 1}));  // 2 of 4 right
  tally.add(full({}, 1.0), logits_for({2, 2}), labels({2, 2}));              // 2 of 2 right
  tally.add(full({}, third_loss), logits_for({1}), labels({0}));             // 0 of 1 right
}

}  // namespace

TEST_CASE("the tally's loss is weighted by batch size and its accuracy counts every image") {
  training::EpochTally tally(3, 4, Device::cpu());
  add_batches(tally, 4.0);
  tally.read();
  CHECK(tally.mean_loss() == doctest::Approx((2.0 * 4 + 1.0 * 2 + 4.0 * 1) / 7));
  CHECK(tally.accuracy() == doctest::Approx(4.0 / 7));
}

TEST_CASE("a non-finite loss (a skipped step) is left out of the mean, not its predictions") {
  training::EpochTally tally(3, 4, Device::cpu());
  add_batches(tally, std::numeric_limits<double>::quiet_NaN());
  tally.read();
  CHECK(tally.mean_loss() == doctest::Approx((2.0 * 4 + 1.0 * 2) / 6));
  CHECK(tally.accuracy() == doctest::Approx(4.0 / 7));
}

TEST_CASE("reads in slices give what one read at the end gives; nothing read yet is NaN loss") {
  training::EpochTally tally(3, 4, Device::cpu());
  CHECK(std::isnan(tally.mean_loss()));
  CHECK(tally.accuracy() == 0);
  tally.add(full({}, 2.0), logits_for({0, 1, 2, 0}), labels({0, 1, 1, 1}));
  tally.read();
  CHECK(tally.mean_loss() == doctest::Approx(2.0));
  CHECK(tally.accuracy() == doctest::Approx(0.5));
  tally.add(full({}, 1.0), logits_for({2, 2}), labels({2, 2}));
  tally.add(full({}, 4.0), logits_for({1}), labels({0}));
  tally.read();
  tally.read();  // nothing new
  CHECK(tally.mean_loss() == doctest::Approx(14.0 / 7));
  CHECK(tally.accuracy() == doctest::Approx(4.0 / 7));
}

TEST_CASE("a batch beyond the room given is an error that says so") {
  training::EpochTally tally(1, 2, Device::cpu());
  tally.add(full({}, 1.0), logits_for({0, 1}), labels({0, 1}));
  CHECK_THROWS_WITH_FRAGMENT(tally.add(full({}, 1.0), logits_for({0}), labels({0})), ValueError,
                             "room for 1 batches and 2 images");
}
