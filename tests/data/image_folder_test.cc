// File: tests/data/image_folder_test.cc
// Image folders: PNG and BMP files written by the test decode to their exact
// pixels (JPEG to within its loss), classes are sorted subfolders, other files
// are skipped, and corrupt, empty or mismatched images are errors naming the file.
// N images, C channels, H, W image size
#include "data/image_folder.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::encode_bmp;
using testing::encode_png;
using testing::path_in;
using testing::temp_dir;
using testing::write_bytes;

// A (C, H, W) uint8 image of seeded random pixels.
Tensor random_image(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator gen(seed);
  return randint(0, 256, {c, h, w}, {.dtype = DType::UInt8}, &gen);
}

std::string class_dir(const std::string& root, const std::string& name) {
  const std::string dir = path_in(root, name);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST_CASE("PNG and BMP decode to the exact pixels, planar (C, H, W)") {
  const Tensor rgb = random_image(3, 5, 7, 1);  // odd width: BMP rows carry padding
  const Tensor png = decode_image(encode_png(rgb), "a.png", 3);
  const Tensor bmp = decode_image(encode_bmp(rgb), "a.bmp", 3);
  CHECK(png.sizes() == Shape{3, 5, 7});
  CHECK(png.to_vector<int64_t>() == rgb.to_vector<int64_t>());
  CHECK(bmp.to_vector<int64_t>() == rgb.to_vector<int64_t>());
  const Tensor gray = random_image(1, 4, 3, 2);
  CHECK(decode_image(encode_png(gray), "g.png", 1).to_vector<int64_t>() ==
        gray.to_vector<int64_t>());
}

TEST_CASE("gray images expand to RGB and RGB images of equal channels reduce to gray") {
  const Tensor gray = random_image(1, 3, 3, 3);
  const Tensor rgb = decode_image(encode_png(gray), "g.png", 3);
  for (int64_t c = 0; c < 3; ++c) {
    CHECK(rgb.select(0, c).to_vector<int64_t>() == gray.select(0, 0).to_vector<int64_t>());
  }
  // A BMP of a gray image stores R = G = B; stb's luma of equal channels is that value.
  CHECK(decode_image(encode_bmp(gray), "g.bmp", 1).to_vector<int64_t>() ==
        gray.to_vector<int64_t>());
}

TEST_CASE("JPEG decodes to within its compression loss") {
  const Tensor flat = full({3, 16, 16}, 100, {.dtype = DType::UInt8});
  const Tensor decoded = decode_image(testing::encode_jpeg(flat, 95), "a.jpg", 3);
  CHECK_CLOSE(decoded.to(DType::Float64), flat.to(DType::Float64), 0, 2);
}

TEST_CASE("load_image_folder: sorted classes, sorted files, other files skipped") {
  const std::string root = temp_dir("folder");
  const std::string zebra = class_dir(root, "zebra");
  const std::string cat = class_dir(root, "cat");
  class_dir(root, ".hidden_class");
  const Tensor a = random_image(3, 4, 6, 10), b = random_image(3, 4, 6, 11);
  const Tensor c = random_image(3, 4, 6, 12);
  write_bytes(path_in(zebra, "b.PNG"), encode_png(b));
  write_bytes(path_in(zebra, "a.bmp"), encode_bmp(a));
  write_bytes(path_in(cat, "c.png"), encode_png(c));
  write_bytes(path_in(cat, "notes.txt"), {'h', 'i'});
  write_bytes(path_in(cat, ".thumb.png"), {0});

  const ImageFolder folder = load_image_folder(root);
  CHECK(folder.classes == std::vector<std::string>{"cat", "zebra"});
  CHECK(folder.dataset.images.sizes() == Shape{3, 3, 4, 6});
  CHECK(folder.dataset.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(folder.dataset.images.select(0, 0).to_vector<int64_t>() == c.to_vector<int64_t>());
  CHECK(folder.dataset.images.select(0, 1).to_vector<int64_t>() == a.to_vector<int64_t>());
  CHECK(folder.dataset.images.select(0, 2).to_vector<int64_t>() == b.to_vector<int64_t>());
  check_dataset(folder.dataset, "test");
}

TEST_CASE("a corrupt image is an error naming the file and stb's reason") {
  const std::string root = temp_dir("corrupt");
  const std::string dog = class_dir(root, "dog");
  write_bytes(path_in(dog, "good.png"), encode_png(random_image(3, 4, 4, 20)));
  const std::string bad = path_in(dog, "junk.png");

  SUBCASE("not an image at all") {
    write_bytes(bad, {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
    CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError,
                               bad + ": cannot decode the image: unknown image type");
  }
  SUBCASE("a PNG cut short") {
    std::vector<uint8_t> png = encode_png(random_image(3, 16, 16, 21));
    png.resize(png.size() / 2);
    write_bytes(bad, png);
    CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError, bad + ": truncated PNG: chunk");
  }
  SUBCASE("an empty file") {
    write_bytes(bad, {});
    CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError, bad + ": file is empty");
  }
  SUBCASE("a header claiming more pixels than the dimension cap") {
    std::vector<uint8_t> bmp = encode_bmp(random_image(3, 2, 2, 22));
    bmp[18] = 0x00, bmp[19] = 0x00, bmp[20] = 0x01;  // width 65536
    write_bytes(bad, bmp);
    CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError, bad + ": cannot decode");
  }
}

TEST_CASE("folder-level errors: sizes that differ, empty classes, no classes") {
  const std::string root = temp_dir("layout");
  const std::string a = class_dir(root, "a");
  write_bytes(path_in(a, "1.png"), encode_png(random_image(3, 4, 4, 30)));
  const std::string b = class_dir(root, "b");

  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError,
                             b + ": class folder has no .png, .jpg, .jpeg or .bmp files");
  write_bytes(path_in(b, "2.bmp"), encode_bmp(random_image(3, 5, 4, 31)));
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError,
                             path_in(b, "2.bmp") + ": image is 5x4 (H x W) but the first image, " +
                                 path_in(a, "1.png") + ", is 4x4");
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(temp_dir("bare")), IoError, "no class subfolders");
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(path_in(root, "nope")), IoError,
                             "nope: does not exist; expected a directory");
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(path_in(a, "1.png")), IoError,
                             "1.png: is a regular file, not a directory");
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root, {.channels = 2}), ValueError,
                             "channels must be 1 (gray) or 3 (RGB), got 2");
}

}  // namespace
}  // namespace loom::data
