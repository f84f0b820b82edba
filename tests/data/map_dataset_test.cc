// File: tests/data/map_dataset_test.cc
// A user-defined MapDataset: to_dataset copies every example in order, the
// DataLoader takes it directly (shuffled batches hold the examples' pixels and
// labels), and badly formed examples are named in the error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

// Example i: a 1x4x3 image whose pixels are all i, labelled i % 3.
class Constant : public MapDataset {
 public:
  explicit Constant(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    Tensor image = full({1, 4, 3}, static_cast<double>(i), {.dtype = DType::UInt8});
    return {image, i % 3};
  }

 private:
  int64_t n_;
};

// Breaks one rule at example `bad`.
class Broken : public MapDataset {
 public:
  enum class Fault { Shape, Dtype, Label };
  explicit Broken(Fault fault) : fault_(fault) {}
  int64_t size() const override { return 3; }
  Example get(int64_t i) const override {
    if (i < 2) return {zeros({1, 2, 2}, {.dtype = DType::UInt8}), 0};
    switch (fault_) {
      case Fault::Shape: return {zeros({1, 3, 2}, {.dtype = DType::UInt8}), 0};
      case Fault::Dtype: return {zeros({1, 2, 2}), 0};
      case Fault::Label: return {zeros({1, 2, 2}, {.dtype = DType::UInt8}), -1};
    }
    return {};
  }

 private:
  Fault fault_;
};

}  // namespace

TEST_CASE("to_dataset copies every example of a MapDataset in order") {
  Dataset set = to_dataset(Constant(5));
  CHECK(set.images.sizes() == Shape{5, 1, 4, 3});
  CHECK(testing::values(set.labels) == std::vector<double>{0, 1, 2, 0, 1});
  CHECK(set.images.at({3, 0, 2, 1}) == 3);
}

TEST_CASE("the DataLoader batches a user-defined data set") {
  DataLoader loader(Constant(10), {.batch_size = 4, .shuffle = true, .mean = {0}, .stddev = {1}});
  CHECK(loader.size() == 3);
  std::multiset<int64_t> seen;
  for (auto& [x, y] : loader) {
    CHECK(x.dtype() == DType::Float32);
    CHECK(x.size(1) == 1);
    for (int64_t b = 0; b < x.size(0); ++b) {
      // normalised pixel = value / 255: recover the example index
      const int64_t i = static_cast<int64_t>(std::lround(x.at({b, 0, 0, 0}) * 255.0));
      CHECK(y.at({b}) == i % 3);
      seen.insert(i);
    }
  }
  CHECK(seen == std::multiset<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("to_dataset names the example that breaks the rules") {
  CHECK_THROWS_WITH_FRAGMENT(to_dataset(Broken(Broken::Fault::Shape)), ShapeError,
                             "example 2 has an image of shape (1, 3, 2) but example 0 has");
  CHECK_THROWS_WITH_FRAGMENT(to_dataset(Broken(Broken::Fault::Dtype)), TypeError,
                             "example 2 has a float32 image");
  CHECK_THROWS_WITH_FRAGMENT(to_dataset(Broken(Broken::Fault::Label)), ValueError,
                             "example 2 has label -1");
  CHECK_THROWS_WITH_FRAGMENT(to_dataset(Constant(0)), ValueError, "size() is 0");
}

}  // namespace loom::data
