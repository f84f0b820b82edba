// File: tests/data/transforms_test.cc
// Transforms: placements (crop + flip) and normalization checked by hand, the
// random transforms against a naive shift-and-mirror written here, the draws'
// ranges and rates, and argument errors.
// N images, C channels, H, W image size, P padding
#include "data/transforms.h"

#include <doctest/doctest.h>

#include <set>
#include <vector>

#include "core/error.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

// 1x1x3x3 image holding 1..9.
Tensor grid3() {
  return tensor({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, {.dtype = DType::UInt8});
}

std::vector<int64_t> placed(const Tensor& images, Placement p, int64_t padding) {
  return apply_placements(images, std::vector<Placement>{p}, padding).to_vector<int64_t>();
}

// Naive reference: pad with zeros, crop at (top, left), then mirror the columns.
std::vector<double> naive_place(const std::vector<double>& image, int64_t C, int64_t H, int64_t W,
                                Placement p, int64_t P) {
  std::vector<double> padded(C * (H + 2 * P) * (W + 2 * P), 0.0);
  const int64_t PW = W + 2 * P, PH = H + 2 * P;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        padded[(c * PH + h + P) * PW + w + P] = image[(c * H + h) * W + w];
  std::vector<double> out(C * H * W);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const double v = padded[(c * PH + p.top + h) * PW + p.left + w];
        out[(c * H + h) * W + (p.flip ? W - 1 - w : w)] = v;
      }
  return out;
}

TEST_CASE("apply_placements by hand: identity, shifts into the padding, flips") {
  const Tensor image = grid3();
  CHECK(placed(image, {1, 1, 0}, 1) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(placed(image, {0, 0, 0}, 0) == std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  // Crop at the padded image's top-left: everything moves down and right by one.
  CHECK(placed(image, {0, 0, 0}, 1) == std::vector<int64_t>{0, 0, 0, 0, 1, 2, 0, 4, 5});
  CHECK(placed(image, {2, 1, 0}, 1) == std::vector<int64_t>{4, 5, 6, 7, 8, 9, 0, 0, 0});
  CHECK(placed(image, {0, 0, 1}, 0) == std::vector<int64_t>{3, 2, 1, 6, 5, 4, 9, 8, 7});
  // Crop first, then mirror (torchvision's RandomCrop then RandomHorizontalFlip).
  CHECK(placed(image, {1, 2, 1}, 1) == std::vector<int64_t>{0, 3, 2, 0, 6, 5, 0, 9, 8});
}

TEST_CASE("apply_placements keeps the dtype and reads any strides") {
  const Tensor floats = tensor({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2}, {.dtype = DType::Float64});
  const Tensor flipped = apply_placements(floats, std::vector<Placement>{{0, 0, 1}}, 0);
  CHECK(flipped.dtype() == DType::Float64);
  CHECK(flipped.to_vector<double>() == std::vector<double>{2, 1, 4, 3, 6, 5, 8, 7});
  // A channels-last copy of the same values gives the same result.
  CHECK(apply_placements(floats.contiguous(MemoryFormat::ChannelsLast),
                         std::vector<Placement>{{0, 0, 1}}, 0)
            .to_vector<double>() == flipped.to_vector<double>());
}

TEST_CASE("normalize by hand: (pixel / 255 - mean) / std per channel") {
  const Tensor pixels = tensor({0, 51, 255, 0, 51, 255}, {1, 2, 1, 3}, {.dtype = DType::UInt8});
  const Tensor x = normalize(pixels, {0.5, 0.0}, {0.25, 2.0});
  CHECK(x.dtype() == DType::Float32);
  CHECK_CLOSE(x, tensor({-2.0, -1.2, 2.0, 0.0, 0.1, 0.5}, {1, 2, 1, 3}), 1e-6, 1e-6);
  // No mean and std: pixels scaled to [0, 1]; one value applies to every channel.
  CHECK_CLOSE(normalize(pixels, {}, {}), tensor({0, 0.2, 1, 0, 0.2, 1}, {1, 2, 1, 3}), 1e-6, 1e-7);
  CHECK_CLOSE(normalize(pixels, {0.2}, {0.2}), tensor({-1, 0, 4, -1, 0, 4}, {1, 2, 1, 3}), 1e-6,
              1e-6);
}

TEST_CASE("random_crop and random_flip against the naive reference, seeded") {
  const Dataset data = testing::random_dataset(16, 2, 5, 6, 10, 7);
  const std::vector<double> pixels = data.images.to_vector<double>();
  const int64_t image = 2 * 5 * 6;
  for (Augment augment : {Augment{.padding = 2}, Augment{.flip = true}, Augment{3, true}}) {
    CAPTURE(augment.padding);
    CAPTURE(augment.flip);
    Generator gen(42), replay(42);
    const Tensor out = data::augment(data.images, augment, gen);
    const std::vector<Placement> drawn = draw_placements(16, augment, replay);
    CHECK(gen.offset() == replay.offset());
    const std::vector<double> values = out.to_vector<double>();
    for (int64_t n = 0; n < 16; ++n) {
      const std::vector<double> one(pixels.begin() + n * image, pixels.begin() + (n + 1) * image);
      const std::vector<double> expected = naive_place(one, 2, 5, 6, drawn[n], augment.padding);
      CHECK(std::vector<double>(values.begin() + n * image, values.begin() + (n + 1) * image) ==
            expected);
    }
  }
  Generator a(1), b(1), c(2);
  CHECK(random_crop(data.images, 2, a).to_vector<int64_t>() ==
        random_crop(data.images, 2, b).to_vector<int64_t>());
  CHECK(random_flip(data.images, a).to_vector<int64_t>() !=
        random_flip(data.images, c).to_vector<int64_t>());
}

TEST_CASE("draws cover every crop offset and flip about half the images") {
  Generator gen(5);
  const std::vector<Placement> drawn = draw_placements(4000, {.padding = 4, .flip = true}, gen);
  std::set<int32_t> tops, lefts;
  int64_t flips = 0;
  for (const Placement& p : drawn) {
    tops.insert(p.top);
    lefts.insert(p.left);
    flips += p.flip;
  }
  CHECK(tops.size() == 9);
  CHECK(*tops.begin() == 0);
  CHECK(*tops.rbegin() == 8);
  CHECK(lefts.size() == 9);
  CHECK(flips > 1800);
  CHECK(flips < 2200);
  Generator none(5);
  for (const Placement& p : draw_placements(50, {}, none)) {
    CHECK(p.top == 0);
    CHECK(p.left == 0);
    CHECK(p.flip == 0);
  }
}

TEST_CASE("gather_images equals normalize of the placed images it picks") {
  const Dataset data = testing::random_dataset(6, 3, 4, 5, 10, 8);
  const std::vector<int64_t> indices = {4, 0, 4};
  const std::vector<Placement> placements = {{0, 1, 1}, {2, 2, 0}, {1, 0, 1}};
  const Normalization norm = make_normalization(3, {0.4, 0.5, 0.6}, {0.2, 0.25, 0.3});
  Tensor out = empty({3, 3, 4, 5});
  gather_images(data.images, indices, placements, 1, norm, out.data_ptr<float>());
  for (int b = 0; b < 3; ++b) {
    const Tensor one = data.images.slice(0, indices[b], indices[b] + 1);
    const Tensor expected =
        normalize(apply_placements(one, {&placements[b], 1}, 1), {0.4, 0.5, 0.6}, {0.2, 0.25, 0.3});
    CHECK_CLOSE(out.slice(0, b, b + 1), expected, 0, 0);
  }
}

TEST_CASE("transform arguments are checked") {
  const Tensor images = grid3();
  Generator gen(0);
  CHECK_THROWS_WITH_FRAGMENT(random_flip(images.view({1, 3, 3}), gen), ShapeError,
                             "[augment] images must be (N, C, H, W), got shape (1, 3, 3)");
  CHECK_THROWS_WITH_FRAGMENT(random_crop(images, -1, gen), ValueError,
                             "padding must be >= 0, got -1");
  CHECK_THROWS_WITH_FRAGMENT(apply_placements(images, std::vector<Placement>(2), 0), ShapeError,
                             "2 placements for 1 images");
  CHECK_THROWS_WITH_FRAGMENT(normalize(images.to(DType::Float32), {}, {}), TypeError,
                             "images must be uint8 pixels (0-255), got float32");
  CHECK_THROWS_WITH_FRAGMENT(normalize(images, {0.1, 0.2}, {}), ValueError,
                             "mean has 2 values for 1 channels");
  CHECK_THROWS_WITH_FRAGMENT(normalize(images, {}, {0.0}), ValueError,
                             "channel 0 has mean 0 and stddev 0; stddev must be positive");
}

}  // namespace
}  // namespace loom::data
