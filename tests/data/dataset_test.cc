// File: tests/data/dataset_test.cc
// Dataset: slices share memory, concat copies in order, class counts, and the
// checks every consumer of a Dataset relies on.
// N samples, C channels, H, W image size
#include "data/dataset.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/error.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::random_dataset;

TEST_CASE("slice is a view of samples [begin, end)") {
  const Dataset data = random_dataset(10, 1, 2, 2, 10, 1);
  const Dataset part = data.slice(3, 7);
  CHECK(part.size() == 4);
  CHECK(part.labels.to_vector<int64_t>() == std::vector<int64_t>{4, 1, 8, 5});
  CHECK(part.images.raw_data() == data.images.select(0, 3).raw_data());
  CHECK(data.slice(10, 10).size() == 0);
  CHECK_THROWS_WITH_FRAGMENT(data.slice(4, 11), IndexError,
                             "range [4, 11) is outside a set of 10 samples");
}

TEST_CASE("concat copies the parts one after another") {
  const Dataset a = random_dataset(3, 2, 2, 2, 10, 1);
  const Dataset b = random_dataset(2, 2, 2, 2, 10, 2);
  const Dataset both = concat({a, b});
  CHECK(both.images.sizes() == Shape{5, 2, 2, 2});
  std::vector<int64_t> pixels = a.images.to_vector<int64_t>();
  const std::vector<int64_t> more = b.images.to_vector<int64_t>();
  pixels.insert(pixels.end(), more.begin(), more.end());
  CHECK(both.images.to_vector<int64_t>() == pixels);
  CHECK(both.labels.to_vector<int64_t>() == std::vector<int64_t>{3, 0, 7, 3, 0});
  CHECK_THROWS_WITH_FRAGMENT(concat({a, random_dataset(1, 3, 2, 2, 10, 3)}), ShapeError,
                             "images (1, 3, 2, 2) do not match the first part's");
}

TEST_CASE("class_counts counts labels in range") {
  const Dataset data = random_dataset(20, 1, 1, 1, 4, 1);  // labels (7i + 3) % 4
  CHECK(class_counts(data, 4) == std::vector<int64_t>{5, 5, 5, 5});
  CHECK(class_counts(data, 2) == std::vector<int64_t>{5, 5});
}

TEST_CASE("check_dataset names what is wrong") {
  const Dataset good = random_dataset(4, 3, 2, 2, 10, 1);
  CHECK_NOTHROW(check_dataset(good, "op"));
  CHECK_THROWS_WITH_FRAGMENT(check_dataset({good.images.flatten(1), good.labels}, "op"), ShapeError,
                             "[op] images must be (N, C, H, W), got shape (4, 12)");
  CHECK_THROWS_WITH_FRAGMENT(check_dataset({good.images, good.labels.slice(0, 0, 3)}, "op"),
                             ShapeError, "labels must be (N,) with N = 4 images, got shape (3,)");
  CHECK_THROWS_WITH_FRAGMENT(check_dataset({good.images.to(DType::Float32), good.labels}, "op"),
                             TypeError, "images must be uint8 and labels int64, got float32");
  CHECK_THROWS_WITH_FRAGMENT(
      check_dataset({good.images.contiguous(MemoryFormat::ChannelsLast), good.labels}, "op"),
      ValueError, "must be contiguous");
  CHECK_THROWS_WITH_FRAGMENT(check_dataset({}, "op"), ValueError, "no images or no labels");
  CHECK_THROWS_WITH_FRAGMENT(check_dataset(good.slice(0, 0), "op"), ValueError,
                             "the dataset is empty");
}

}  // namespace
}  // namespace loom::data
