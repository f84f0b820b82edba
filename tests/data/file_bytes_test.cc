// File: tests/data/file_bytes_test.cc
// Whole-file reads: plain and gzip round trips, concatenated gzip members, and
// the errors for missing, oversized, truncated and corrupt files; every
// loader's refusal of FIFOs and devices and its IoErrors for filesystem
// failures (symlink loops, over-long paths, folders without permission).
#include "data/file_bytes.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/image_folder.h"
#include "tests/data/fixtures.h"
#include "tests/testing.h"

namespace loom::data {
namespace {

using testing::path_in;
using testing::read_bytes;
using testing::temp_dir;
using testing::write_bytes;

std::vector<uint8_t> counting_bytes(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 31 + i / 7);
  return bytes;
}

TEST_CASE("plain and gzip files round-trip, large and empty") {
  const std::string folder = temp_dir("bytes");
  for (size_t n : {size_t{0}, size_t{1}, size_t{300000}}) {
    const std::vector<uint8_t> bytes = counting_bytes(n);
    write_file_bytes(path_in(folder, "a.bin"), bytes, false);
    write_file_bytes(path_in(folder, "a.bin.gz"), bytes, true);
    CHECK(read_file_bytes(path_in(folder, "a.bin"), "t", 1 << 20) == bytes);
    CHECK(read_file_bytes(path_in(folder, "a.bin.gz"), "t", 1 << 20) == bytes);
  }
}

TEST_CASE("concatenated gzip members read as one stream") {
  const std::string folder = temp_dir("members");
  write_file_bytes(path_in(folder, "1.gz"), {{1, 2, 3}}, true);
  write_file_bytes(path_in(folder, "2.gz"), {{4, 5}}, true);
  std::vector<uint8_t> joined = read_bytes(path_in(folder, "1.gz"));
  const std::vector<uint8_t> second = read_bytes(path_in(folder, "2.gz"));
  joined.insert(joined.end(), second.begin(), second.end());
  write_bytes(path_in(folder, "both.gz"), joined);
  CHECK(read_file_bytes(path_in(folder, "both.gz"), "t", 100) ==
        std::vector<uint8_t>{1, 2, 3, 4, 5});
}

TEST_CASE("read errors name the tag, the file and the problem") {
  const std::string folder = temp_dir("errors");
  const std::string missing = path_in(folder, "missing.bin");
  CHECK_THROWS_WITH_FRAGMENT(read_file_bytes(missing, "idx", 100), IoError,
                             "[idx] " + missing + ": cannot open: No such file or directory");
  const std::string big = path_in(folder, "big.bin");
  write_file_bytes(big, counting_bytes(101), false);
  CHECK_THROWS_WITH_FRAGMENT(read_file_bytes(big, "idx", 100), IoError,
                             "file is larger than the 100 bytes this reader accepts");
  const std::string bomb = path_in(folder, "bomb.gz");
  write_file_bytes(bomb, std::vector<uint8_t>(100000, 0), true);
  CHECK_THROWS_WITH_FRAGMENT(read_file_bytes(bomb, "idx", 1000), IoError,
                             "decompresses to more than the 1000 bytes this reader accepts");
  const std::string corrupt = path_in(folder, "corrupt.gz");
  write_file_bytes(corrupt, counting_bytes(5000), true);
  std::vector<uint8_t> bytes = read_bytes(corrupt);
  for (size_t i = 20; i < 60; ++i) bytes[i] ^= 0x5A;
  write_bytes(corrupt, bytes);
  CHECK_THROWS_WITH_FRAGMENT(read_file_bytes(corrupt, "idx", 1 << 20), IoError,
                             corrupt + ": corrupt gzip data at compressed offset");
}

// The gzip bytes of `bytes`, as write_file_bytes stores them.
std::vector<uint8_t> gzipped(const std::vector<uint8_t>& bytes) {
  const std::string path = path_in(temp_dir("gzipped"), "x.gz");
  write_file_bytes(path, bytes, true);
  return read_bytes(path);
}

TEST_CASE("gunzip grows its buffer when the last member's ISIZE undersells the stream") {
  // The trailer of the last member says 2 bytes; the stream holds 300002.
  const std::vector<uint8_t> big = counting_bytes(300000);
  std::vector<uint8_t> packed = gzipped(big);
  const std::vector<uint8_t> small = gzipped({{4, 5}});
  packed.insert(packed.end(), small.begin(), small.end());
  std::vector<uint8_t> expected = big;
  expected.insert(expected.end(), {4, 5});
  CHECK(gunzip_bytes(packed, "m.gz", "t", 1 << 20) == expected);
  CHECK_THROWS_WITH_FRAGMENT(gunzip_bytes(packed, "m.gz", "t", 300001), IoError,
                             "[t] m.gz: decompresses to more than the 300001 bytes");
}

TEST_CASE("gunzip rejects truncated streams wherever they are cut") {
  const std::vector<uint8_t> packed = gzipped(counting_bytes(100000));
  // Inside the header, the deflate data, the CRC and the ISIZE trailer.
  for (size_t keep : {size_t{5}, size_t{12}, packed.size() / 2, packed.size() - 6, packed.size() - 1}) {
    CAPTURE(keep);
    const std::vector<uint8_t> cut(packed.begin(), packed.begin() + keep);
    CHECK_THROWS_WITH_FRAGMENT(gunzip_bytes(cut, "cut.gz", "t", 1 << 20), IoError,
                               "[t] cut.gz: gzip stream is truncated");
  }
}

TEST_CASE("gunzip rejects a wrong CRC, a wrong ISIZE and bytes after the last member") {
  const std::vector<uint8_t> packed = gzipped(counting_bytes(5000));
  std::vector<uint8_t> crc = packed;
  crc[crc.size() - 8] ^= 0x01;
  CHECK_THROWS_WITH_FRAGMENT(gunzip_bytes(crc, "crc.gz", "t", 1 << 20), IoError,
                             "[t] crc.gz: corrupt gzip data at compressed offset");
  std::vector<uint8_t> size = packed;
  size[size.size() - 1] = 0x40;  // claims 1 GiB more than the member holds
  CHECK_THROWS_WITH_FRAGMENT(gunzip_bytes(size, "size.gz", "t", 1 << 20), IoError,
                             "[t] size.gz: corrupt gzip data at compressed offset");
  std::vector<uint8_t> trailing = packed;
  trailing.insert(trailing.end(), {0, 0, 0, 0});
  CHECK_THROWS_WITH_FRAGMENT(gunzip_bytes(trailing, "tail.gz", "t", 1 << 20), IoError,
                             "[t] tail.gz: corrupt gzip data at compressed offset");
}

TEST_CASE("helpers") {
  CHECK(hex_prefix(std::vector<uint8_t>{0x1F, 0x8B, 0x08}, 2) == "1F 8B");
  CHECK(starts_with_gzip_magic(std::vector<uint8_t>{0x1F, 0x8B}));
  CHECK_FALSE(starts_with_gzip_magic(std::vector<uint8_t>{0x1F}));
  CHECK(ends_with("a.gz", ".gz"));
  CHECK_FALSE(ends_with("gz", ".gz"));
}

// Every public loader, each pointed at `folder` or at `file` inside it.
struct Loader {
  const char* name;
  std::function<void(const std::string& folder)> load;
};

std::vector<Loader> loaders_of(const std::string& file_name) {
  return {
      {"read_idx", [=](const std::string& f) { read_idx(path_in(f, file_name)); }},
      {"load_mnist", [](const std::string& f) { load_mnist(f, Split::Train); }},
      {"read_cifar_batch", [=](const std::string& f) { read_cifar_batch(path_in(f, file_name)); }},
      {"load_cifar10", [](const std::string& f) { load_cifar10(f, Split::Test); }},
      {"read_image", [=](const std::string& f) { read_image(path_in(f, file_name), 3); }},
      {"load_image_folder", [](const std::string& f) { load_image_folder(f); }},
  };
}

TEST_CASE("every file loader refuses FIFOs and devices at once instead of blocking or reading") {
  const std::string folder = temp_dir("fifos");
  for (const char* name :
       {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "test_batch.bin", "x.png"}) {
    REQUIRE(::mkfifo(path_in(folder, name).c_str(), 0600) == 0);
  }
  const std::vector<std::pair<std::string, std::function<void()>>> loads = {
      {"read_idx", [&] { read_idx(path_in(folder, "train-images-idx3-ubyte")); }},
      {"load_mnist", [&] { load_mnist(folder, Split::Train); }},
      {"read_cifar_batch", [&] { read_cifar_batch(path_in(folder, "test_batch.bin")); }},
      {"load_cifar10", [&] { load_cifar10(folder, Split::Test); }},
      {"read_image", [&] { read_image(path_in(folder, "x.png"), 3); }},
  };
  for (const auto& [name, load] : loads) {
    INFO(name);
    CHECK_THROWS_WITH_FRAGMENT(load(), IoError, "not a regular file (a FIFO)");
  }
  // In an image folder a FIFO is not an image: skipped, as other non-images are.
  const std::string root = temp_dir("fifo_class");
  std::filesystem::create_directory(path_in(root, "cat"));
  REQUIRE(::mkfifo(path_in(root, "cat/1.png").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_FRAGMENT(load_image_folder(root), IoError, "class folder has no .png");
  for (const char* device : {"/dev/zero", "/dev/null"}) {
    INFO(device);
    CHECK_THROWS_WITH_FRAGMENT(read_idx(device), IoError, "(a character device)");
    CHECK_THROWS_WITH_FRAGMENT(read_cifar_batch(device), IoError, "(a character device)");
    CHECK_THROWS_WITH_FRAGMENT(read_image(device, 1), IoError, "(a character device)");
  }
}

TEST_CASE("filesystem failures are IoErrors naming the path and the OS's reason") {
  const std::string base = temp_dir("fs_errors");
  std::filesystem::create_symlink(path_in(base, "b"), path_in(base, "a"));
  std::filesystem::create_symlink(path_in(base, "a"), path_in(base, "b"));
  const std::string long_folder = path_in(base, std::string(5000, 'x'));
  for (const Loader& loader : loaders_of("f")) {
    INFO(loader.name);
    CHECK_THROWS_WITH_FRAGMENT(loader.load(path_in(base, "a")), IoError,
                               "Too many levels of symbolic links");
    CHECK_THROWS_WITH_FRAGMENT(loader.load(long_folder), IoError, "File name too long");
  }
}

TEST_CASE("a data folder without read permission is an IoError saying so, for an ordinary user") {
  const std::string shared = testing::shared_temp_dir("no_permission");
  const std::string locked = path_in(shared, "locked");
  std::filesystem::create_directories(path_in(locked, "cat"));
  std::filesystem::permissions(locked, std::filesystem::perms::none);
  for (const Loader& loader : loaders_of("f")) {
    INFO(loader.name);
    const std::string message = testing::error_as_ordinary_user([&] { loader.load(locked); });
    CHECK_MESSAGE(message.find("Permission denied") != std::string::npos, message);
    CHECK_MESSAGE(message.find(locked) != std::string::npos, message);
  }
  // A class folder that cannot be listed, inside a readable root.
  const std::string root = path_in(shared, "root");
  std::filesystem::create_directories(path_in(root, "cat"));
  std::filesystem::permissions(path_in(root, "cat"), std::filesystem::perms::owner_exec);
  const std::string message = testing::error_as_ordinary_user([&] { load_image_folder(root); });
  CHECK_MESSAGE(message.find("[image_folder] " + path_in(root, "cat") +
                             ": cannot list the folder: Permission denied") != std::string::npos,
                message);
  std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  std::filesystem::remove_all(shared);
}

}  // namespace
}  // namespace loom::data
