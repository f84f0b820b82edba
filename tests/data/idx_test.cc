// File: tests/data/idx_test.cc
// IDX / MNIST: round trips of generated files (plain and gzip), each of the 14
// malformed-file cases of reliability-anchors.md section 8 with its specific
// error, and the real Fashion-MNIST test split where Debian installed it.
// N images, H rows, W cols
#include "data/idx.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/file_bytes.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::append_be32;
using testing::path_in;
using testing::temp_dir;
using testing::write_bytes;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

// An IDX file: magic 00 00 type ndim, the dims, then `payload` bytes of value 1.
std::vector<uint8_t> idx_file(uint8_t type, const std::vector<uint32_t>& dims, size_t payload) {
  std::vector<uint8_t> bytes = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) append_be32(bytes, d);
  bytes.resize(bytes.size() + payload, 1);
  return bytes;
}

// Writes `bytes` to a fresh folder and returns the path.
std::string write_idx_bytes(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = path_in(temp_dir("idx"), name);
  write_bytes(path, bytes);
  return path;
}

// An MNIST folder whose test split is `images` and `labels` (as file bytes).
std::string mnist_folder(const std::vector<uint8_t>& images, const std::vector<uint8_t>& labels) {
  const std::string folder = temp_dir("mnist");
  write_bytes(path_in(folder, "t10k-images-idx3-ubyte"), images);
  write_bytes(path_in(folder, "t10k-labels-idx1-ubyte"), labels);
  return folder;
}

std::vector<uint8_t> good_images(uint32_t n) { return idx_file(0x08, {n, 28, 28}, n * 784); }
std::vector<uint8_t> good_labels(uint32_t n) { return idx_file(0x08, {n}, n); }

TEST_CASE("read_idx round-trips every element type, plain and gzipped") {
  const std::string folder = temp_dir("idx_round_trip");
  const IdxType types[] = {IdxType::UInt8, IdxType::Int8,    IdxType::Int16,
                           IdxType::Int32, IdxType::Float32, IdxType::Float64};
  for (IdxType type : types) {
    for (bool gzip : {false, true}) {
      CAPTURE(idx_type_name(type));
      CAPTURE(gzip);
      IdxArray array{type, {2, 3, 5}, {}};
      array.bytes.resize(30 * idx_element_size(type));
      for (size_t i = 0; i < array.bytes.size(); ++i) array.bytes[i] = static_cast<uint8_t>(i * 37);
      const std::string path = path_in(folder, gzip ? "a.idx.gz" : "a.idx");
      write_idx(path, array);
      const IdxArray back = read_idx(path);
      CHECK(back.type == type);
      CHECK(back.dims == array.dims);
      CHECK(back.bytes == array.bytes);
    }
  }
}

TEST_CASE("the payload is big-endian on disk and host-order in memory") {
  const std::vector<uint8_t> file = {0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE};
  const IdxArray array = parse_idx(file, "int16.idx");
  int16_t values[2];
  std::memcpy(values, array.bytes.data(), sizeof(values));
  CHECK(values[0] == 0x0102);
  CHECK(values[1] == -2);
  CHECK(encode_idx(array) == file);
  // Handing over the buffer parses the same as lending it.
  const IdxArray moved = parse_idx(std::vector<uint8_t>(file), "int16.idx");
  CHECK(moved.type == array.type);
  CHECK(moved.dims == array.dims);
  CHECK(moved.bytes == array.bytes);
}

TEST_CASE("load_mnist round-trips a generated folder, plain and gzipped") {
  const Dataset data = testing::random_dataset(7, 1, 28, 28, 10, /*seed=*/3);
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string folder = temp_dir("mnist_round_trip");
    save_mnist(folder, Split::Train, data, gzip);
    CHECK(std::filesystem::exists(
        path_in(folder, gzip ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte")));
    const Dataset back = load_mnist(folder, Split::Train);
    CHECK(back.images.sizes() == Shape{7, 1, 28, 28});
    CHECK(back.images.dtype() == DType::UInt8);
    CHECK(back.labels.dtype() == DType::Int64);
    CHECK(back.images.to_vector<int64_t>() == data.images.to_vector<int64_t>());
    CHECK(back.labels.to_vector<int64_t>() == data.labels.to_vector<int64_t>());
  }
}

// --- the 14 malformed-file cases ----------------------------------------------

TEST_CASE("idx case 1: an empty file or one shorter than the magic number") {
  const std::string empty_path = write_idx_bytes({}, "empty-idx3-ubyte");
  CHECK_THROWS_WITH_FRAGMENT(read_idx(empty_path), IoError,
                             empty_path + ": file is 0 bytes; an IDX file starts with a 4-byte");
  const std::string short_path = write_idx_bytes({0, 0, 8}, "short-idx3-ubyte");
  CHECK_THROWS_WITH_FRAGMENT(read_idx(short_path), IoError, "file is 3 bytes");
}

TEST_CASE("idx case 2: a header cut short of its ndim dims") {
  const std::vector<uint8_t> bytes = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0};
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(bytes, "cut.idx"), IoError,
                             "[idx] cut.idx: header cut short: ndim 3 needs 16 header bytes, "
                             "the file has 10");
}

TEST_CASE("idx case 3: magic bytes 0-1 not zero") {
  std::vector<uint8_t> bytes = good_labels(3);
  bytes[0] = 0x01;
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(bytes, "x.idx"), IoError,
                             "magic bytes 0-1 are 01 00; expected 00 00");
}

TEST_CASE("idx case 4: type code 0x0A (which torchvision's range check lets through)") {
  for (uint8_t code : {uint8_t{0x0A}, uint8_t{0x07}, uint8_t{0x0F}}) {
    std::vector<uint8_t> bytes = good_labels(3);
    bytes[2] = code;
    CHECK_THROWS_WITH_FRAGMENT(parse_idx(bytes, "x.idx"), IoError,
                               fmt::format("element type code 0x{:02X} at offset 2 is not an IDX "
                                           "type",
                                           code));
  }
}

TEST_CASE("idx case 5: a valid IDX type that MNIST does not use") {
  const uint32_t n = 2;
  const std::string folder = mnist_folder(idx_file(0x0B, {n, 28, 28}, n * 784 * 2), good_labels(n));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(folder, Split::Test), IoError,
                             "t10k-images-idx3-ubyte: element type (offset 2) is int16 (0x0B); "
                             "MNIST files hold uint8 (0x08)");
  const std::string labels = mnist_folder(good_images(n), idx_file(0x0D, {n}, n * 4));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(labels, Split::Test), IoError, "is float32 (0x0D)");
}

TEST_CASE("idx case 6: ndim 0, or the wrong ndim for images and labels") {
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(std::vector<uint8_t>{0, 0, 8, 0}, "x.idx"), IoError,
                             "ndim is 0 at offset 3; expected at least 1 dimension");
  const std::string flat = mnist_folder(idx_file(0x08, {5, 784}, 5 * 784), good_labels(5));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(flat, Split::Test), IoError,
                             "images have 2 dims (5, 784); expected 3 (count, rows, cols)");
  const std::string wide = mnist_folder(good_images(5), idx_file(0x08, {5, 1}, 5));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(wide, Split::Test), IoError,
                             "labels have 2 dims (5, 1); expected 1 (count)");
}

TEST_CASE("idx case 7: rows or cols other than 28") {
  const std::string folder = mnist_folder(idx_file(0x08, {2, 27, 28}, 2 * 27 * 28), good_labels(2));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(folder, Split::Test), IoError,
                             "images are 27x28 (rows x cols, offsets 8 and 12); MNIST images "
                             "are 28x28");
}

TEST_CASE("idx case 8: a zero dim, or dims whose product overflows 64 bits") {
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(idx_file(0x08, {3, 0, 28}, 0), "x.idx"), IoError,
                             "dim 1 (offset 8) is 0; expected at least 1");
  const std::vector<uint32_t> huge(3, 0xFFFFFFFFu);
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(idx_file(0x0E, huge, 0), "x.idx"), IoError,
                             "the product of the dims overflows 64 bits at dim 1 (offset 8, "
                             "value 4294967295)");
}

TEST_CASE("idx case 9: a payload shorter than the header declares") {
  std::vector<uint8_t> bytes = good_images(2);
  bytes.resize(bytes.size() - 5);
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(bytes, "x.idx"), IoError,
                             "payload is 1563 bytes but the header declares dims (2, 28, 28) of "
                             "uint8 = 1568 bytes (the file is truncated)");
}

TEST_CASE("idx case 10: trailing bytes after the payload") {
  std::vector<uint8_t> bytes = good_images(1);
  bytes.insert(bytes.end(), {7, 7, 7});
  CHECK_THROWS_WITH_FRAGMENT(parse_idx(bytes, "x.idx"), IoError,
                             "3 trailing bytes after the 784-byte payload of dims (1, 28, 28); "
                             "expected the file to end at offset 800");
}

TEST_CASE("idx case 11: image count differs from label count") {
  const std::string folder = mnist_folder(good_images(5), good_labels(4));
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(folder, Split::Test), IoError,
                             "5 images in " + path_in(folder, "t10k-images-idx3-ubyte") +
                                 " but 4 labels in " + path_in(folder, "t10k-labels-idx1-ubyte"));
}

TEST_CASE("idx case 12: a label above 9") {
  std::vector<uint8_t> labels = good_labels(4);
  labels[8 + 2] = 10;
  const std::string folder = mnist_folder(good_images(4), labels);
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(folder, Split::Test), IoError,
                             "t10k-labels-idx1-ubyte: label 10 at index 2 (offset 10); expected "
                             "0-9");
}

TEST_CASE("idx case 13: a little-endian header is reported as byte-swapped") {
  std::vector<uint8_t> bytes = {3, 8, 0, 0};
  bytes.resize(16 + 784, 0);
  const std::string path = path_in(temp_dir("swapped"), "train-images-idx3-ubyte.gz");
  write_file_bytes(path, bytes, /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError,
                             "[idx] " + path +
                                 ": byte-swapped (little-endian) header: magic reads 0x03080000; "
                                 "expected 0x00000803");
}

TEST_CASE("idx case 14: a gzip file that was never decompressed") {
  const std::string folder = temp_dir("never_gunzipped");
  const std::string packed = path_in(folder, "labels.gz");
  write_file_bytes(packed, good_labels(3), /*gzip=*/true);
  const std::string misnamed = path_in(folder, "t10k-labels-idx1-ubyte");
  std::filesystem::rename(packed, misnamed);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(misnamed), IoError,
                             misnamed +
                                 ": starts 1F 8B, a gzip stream that was never "
                                 "decompressed; gunzip it");
  // Compressed twice: what is inside the .gz is itself gzip.
  const std::string twice = path_in(folder, "twice.gz");
  write_file_bytes(twice, testing::read_bytes(misnamed), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(twice), IoError, "never decompressed");
}

// --- file-level problems ---------------------------------------------------------

TEST_CASE("load_mnist names the files it looked for when they are missing") {
  const std::string folder = temp_dir("no_mnist");
  CHECK_THROWS_WITH_FRAGMENT(load_mnist(folder, Split::Train), IoError,
                             "neither train-images-idx3-ubyte nor train-images-idx3-ubyte.gz "
                             "exists");
}

TEST_CASE("gzip problems: a .gz name on plain data, a truncated stream") {
  const std::string folder = temp_dir("bad_gzip");
  const std::string plain = path_in(folder, "labels.gz");
  write_bytes(plain, good_labels(3));
  CHECK_THROWS_WITH_FRAGMENT(read_idx(plain), IoError,
                             "named .gz but is not gzip data (starts 00 00 08 01");
  const std::string packed = path_in(folder, "images.gz");
  write_file_bytes(packed, good_images(3), /*gzip=*/true);
  std::vector<uint8_t> bytes = testing::read_bytes(packed);
  bytes.resize(bytes.size() / 2);
  write_bytes(packed, bytes);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(packed), IoError, "gzip stream is truncated");
}

TEST_CASE("a gzip whose IDX header declares more than the cap fails before it is inflated") {
  const std::string folder = temp_dir("declared");
  const std::string path = path_in(folder, "train-images-idx3-ubyte.gz");
  // Dims (6633, 28, 28, 1000): 5.2 GB declared. 8 MiB of zeros follow, so
  // that the old reader reported truncation only after inflating them all.
  std::vector<uint8_t> bytes = idx_file(0x08, {6633, 28, 28, 1000}, 8 << 20);
  write_file_bytes(path, bytes, /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError,
                             path + ": the header declares dims (6633, 28, 28, 1000) of uint8 = "
                                    "5200272000 bytes, more than the 1073741824 bytes this reader "
                                    "accepts (rejected before decompressing)");
  // A header within the cap is still read in full (and here found truncated).
  write_file_bytes(path, idx_file(0x08, {100, 28, 28}, 1000), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError, "(the file is truncated)");
}

TEST_CASE("dims whose product is 2^64 - 1 are refused before inflating, not wrapped past the cap") {
  // (2^32 - 1) * 641 * 6700417 = 2^64 - 1: with the 16-byte header added, the
  // declared size wrapped to 15 bytes and passed the cap check, and the 1 MiB of
  // zeros behind it were inflated to the 1 GiB cap twice (17-25 s).
  const std::string path = path_in(temp_dir("wrapped"), "wrapped.idx.gz");
  write_file_bytes(path, idx_file(0x08, {4294967295u, 641, 6700417}, 1 << 20), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError,
                             "the header declares dims (4294967295, 641, 6700417) of uint8 = "
                             "18446744073709551615 bytes, more than the 1073741824 bytes");
  // int16 elements make the same product overflow: named by parse_idx.
  write_file_bytes(path, idx_file(0x0B, {4294967295u, 641, 6700417}, 64), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError, "the product of the dims overflows 64 bits");
}

TEST_CASE("a gzip stream stops inflating where its header says the file ends") {
  // Dims (2, 2): a 20-byte file; 64 MiB of zeros follow in the stream. Inflating
  // stops past the declared size instead of running to the 1 GiB cap.
  const std::string path = path_in(temp_dir("longer"), "longer.idx.gz");
  write_file_bytes(path, idx_file(0x08, {2, 2}, 64 << 20), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError,
                             path + ": decompresses to more than the 16 bytes its header declares "
                                    "(more data follows the payload)");
  write_file_bytes(path, idx_file(0x08, {2, 2}, 4), /*gzip=*/true);
  CHECK(read_idx(path).bytes.size() == 4);
  // A malformed header is left for parse_idx to name, with the reader's cap.
  write_file_bytes(path, idx_file(0x08, {2, 0}, 100), /*gzip=*/true);
  CHECK_THROWS_WITH_FRAGMENT(read_idx(path), IoError, "dim 1 (offset 8) is 0");
}

// --- the real data set -----------------------------------------------------------

TEST_CASE("Fashion-MNIST's test split loads with its known statistics" *
          doctest::skip(!std::filesystem::exists(kFashionMnist))) {
  const Dataset test = load_mnist(kFashionMnist, Split::Test);
  CHECK(test.images.sizes() == Shape{10000, 1, 28, 28});
  CHECK(test.labels.sizes() == Shape{10000});
  CHECK(class_counts(test, 10) == std::vector<int64_t>(10, 1000));
  const std::vector<int64_t> labels = test.labels.to_vector<int64_t>();
  CHECK(std::vector<int64_t>(labels.begin(), labels.begin() + 10) ==
        std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  // Pixel sums computed independently with Python's gzip module.
  const uint8_t* pixels = test.images.data_ptr<uint8_t>();
  int64_t total = 0, first = 0;
  for (int64_t i = 0; i < test.images.numel(); ++i) total += pixels[i];
  for (int64_t i = 0; i < 784; ++i) first += pixels[i];
  CHECK(total == 573469082);
  CHECK(first == 33456);
}

}  // namespace
}  // namespace loom::data
