// File: tests/data/cifar_test.cc
// CIFAR-10 binary batches: round trips of generated fixtures, and every
// applicable malformed-file case of reliability-anchors.md section 8 with its
// specific error (empty, partial record, official size in strict mode, label
// above 9, missing and duplicate files, the pickled python version, the test
// batch's class balance).
// N images, C = 3 channels, H = W = 32
#include "data/cifar.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::path_in;
using testing::random_dataset;
using testing::temp_dir;
using testing::write_bytes;

Dataset cifar_like(int64_t n, uint64_t seed) { return random_dataset(n, 3, 32, 32, 10, seed); }

void check_same(const Dataset& actual, const Dataset& expected) {
  CHECK(actual.images.sizes() == expected.images.sizes());
  CHECK(actual.images.to_vector<int64_t>() == expected.images.to_vector<int64_t>());
  CHECK(actual.labels.to_vector<int64_t>() == expected.labels.to_vector<int64_t>());
}

// A record whose label byte is `label` and whose pixels are all `pixel`.
std::vector<uint8_t> record(uint8_t label, uint8_t pixel) {
  std::vector<uint8_t> bytes(kCifarRecordBytes, pixel);
  bytes[0] = label;
  return bytes;
}

std::string batch_file(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = path_in(temp_dir("cifar"), name);
  write_bytes(path, bytes);
  return path;
}

TEST_CASE("a batch file round-trips, with the record layout label then R, G, B planes") {
  const Dataset data = cifar_like(6, 1);
  const std::string path = path_in(temp_dir("cifar_batch"), "data_batch_1.bin");
  write_cifar_batch(path, data);
  CHECK(std::filesystem::file_size(path) == 6 * 3073);
  check_same(read_cifar_batch(path), data);
  // Record 1 starts at byte 3073: its label, then pixel (c=0, h=0, w=0).
  const std::vector<uint8_t> bytes = testing::read_bytes(path);
  CHECK(bytes[3073] == data.labels.at({1}));
  CHECK(bytes[3074] == data.images.at({1, 0, 0, 0}));
  CHECK(bytes[3074 + 1024 + 33] == data.images.at({1, 1, 1, 1}));
}

TEST_CASE("load_cifar10 reads the five train batches in order and the test batch") {
  const std::string folder = temp_dir("cifar_folder");
  const Dataset train = cifar_like(12, 2);
  const Dataset test = cifar_like(4, 3);
  save_cifar10(folder, Split::Train, train);
  save_cifar10(folder, Split::Test, test);
  for (int b = 1; b <= 5; ++b) {
    CHECK(std::filesystem::exists(path_in(folder, fmt::format("data_batch_{}.bin", b))));
  }
  check_same(load_cifar10(folder, Split::Train), train);
  check_same(load_cifar10(folder, Split::Test), test);
}

TEST_CASE("strict mode accepts an official-size test batch with 1000 images per class") {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 10000; ++i) {
    const std::vector<uint8_t> r = record(static_cast<uint8_t>(i % 10), 7);
    bytes.insert(bytes.end(), r.begin(), r.end());
  }
  const std::string folder = temp_dir("cifar_official");
  write_bytes(path_in(folder, "test_batch.bin"), bytes);
  const Dataset test = load_cifar10(folder, Split::Test, {.strict = true});
  CHECK(test.size() == 10000);

  SUBCASE("case 9: a test batch whose classes are not balanced") {
    bytes[3 * 3073] = 4;  // record 3: class 3 -> class 4
    write_bytes(path_in(folder, "test_batch.bin"), bytes);
    CHECK_THROWS_WITH_FRAGMENT(load_cifar10(folder, Split::Test, {.strict = true}), IoError,
                               "class 3 has 999 test images; expected 1000 per class (strict "
                               "mode)");
  }
}

// --- the malformed-file cases ------------------------------------------------------

TEST_CASE("cifar case 1: an empty file") {
  const std::string path = batch_file({}, "data_batch_1.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path), IoError,
                             path + ": file is empty; expected records of 3073 bytes");
}

TEST_CASE("cifar case 2: a size that is not a whole number of records") {
  std::vector<uint8_t> bytes = record(1, 0);
  bytes.resize(6000, 0);
  const std::string path = batch_file(bytes, "data_batch_2.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path), IoError,
                             "size 6000 bytes is not a multiple of the 3073-byte record (1 label "
                             "+ 3x32x32 pixels): 1 whole records and 2927 bytes left over");
}

TEST_CASE("cifar case 3: strict mode wants official batches of exactly 30730000 bytes") {
  const std::string path = batch_file(record(1, 0), "test_batch.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path, {.strict = true}), IoError,
                             "size 3073 bytes (1 records); an official batch is exactly 30730000 "
                             "bytes (10000 records) (strict mode");
  CHECK(read_cifar_batch(path).size() == 1);  // not strict: a fixture loads
  const std::string other = batch_file(record(1, 0), "subset.bin");
  CHECK(read_cifar_batch(other, {.strict = true}).size() == 1);  // not an official name
}

TEST_CASE("cifar case 4: a label byte above 9") {
  std::vector<uint8_t> bytes = record(3, 0);
  const std::vector<uint8_t> bad = record(10, 0);
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  const std::string path = batch_file(bytes, "data_batch_1.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path), IoError,
                             "label 10 out of range at record 1 (offset 3073); expected 0-9");
}

TEST_CASE("cifar case 4b: a first label byte of 0x80 is a bad label, not a pickle") {
  for (uint8_t second : {uint8_t{0}, uint8_t{2}}) {  // 80 02 also begins a protocol-2 pickle
    CAPTURE(second);
    std::vector<uint8_t> bytes = record(0x80, second);
    const std::string path = batch_file(bytes, "data_batch_1.bin");
    CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path), IoError,
                               "label 128 out of range at record 0 (offset 0); expected 0-9");
  }
}

TEST_CASE("cifar case 5: missing and duplicated batch files") {
  const std::string folder = temp_dir("cifar_files");
  save_cifar10(folder, Split::Train, cifar_like(10, 4));

  SUBCASE("a missing batch") {
    std::filesystem::remove(path_in(folder, "data_batch_3.bin"));
    CHECK_THROWS_WITH_FRAGMENT(load_cifar10(folder, Split::Train), IoError,
                               "data_batch_3.bin is missing; the train split needs "
                               "data_batch_1.bin .. data_batch_5.bin");
  }
  SUBCASE("a missing test batch") {
    CHECK_THROWS_WITH_FRAGMENT(load_cifar10(folder, Split::Test), IoError,
                               "test_batch.bin is missing; the test split needs test_batch.bin");
  }
  SUBCASE("a batch that is a copy of another") {
    std::filesystem::copy_file(path_in(folder, "data_batch_2.bin"),
                               path_in(folder, "data_batch_4.bin"),
                               std::filesystem::copy_options::overwrite_existing);
    CHECK_THROWS_WITH_FRAGMENT(load_cifar10(folder, Split::Train), IoError,
                               "data_batch_4.bin is byte-identical to data_batch_2.bin (a "
                               "duplicated batch file)");
  }
}

TEST_CASE("cifar case 6: the pickled python version is detected, never unpickled") {
  // Protocol-2 pickles start with the PROTO opcode 0x80 and the version.
  const std::vector<uint8_t> pickle = {0x80, 0x02, '}', 'q', 0x00, '(', 'U', 0x06};
  const std::string path = batch_file(pickle, "data_batch_1.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(path), IoError,
                             "starts 80 02, a Python pickle (the \"python version\" of CIFAR-10)");
  // A cifar-10-batches-py folder: the names lack .bin.
  const std::string folder = temp_dir("cifar_py");
  write_bytes(path_in(folder, "test_batch"), pickle);
  CHECK_THROWS_WITH_FRAGMENT(load_cifar10(folder, Split::Test), IoError,
                             "test_batch without .bin is there: that is the pickled python "
                             "version");
}

TEST_CASE("writers reject what the format cannot hold") {
  const Dataset gray = random_dataset(2, 1, 32, 32, 10, 5);
  CHECK_THROWS_WITH_FRAGMENT(write_cifar_batch(path_in(temp_dir("w"), "x.bin"), gray), ShapeError,
                             "are (N, 3, 32, 32), got (2, 1, 32, 32)");
  CHECK_THROWS_WITH_FRAGMENT(save_cifar10(temp_dir("w"), Split::Train, cifar_like(3, 6)),
                             ValueError, "needs at least 5 samples (one per batch file), got 3");
}

}  // namespace
}  // namespace loom::data
