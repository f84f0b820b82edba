// File: tests/core/input_file_test.cc
// Regular files only, sizes checked before reading, and filesystem failures
// as IoErrors naming the path and the OS's reason (issue 35, findings 5 and 6).
#include "core/input_file.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/testing.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(base ? base : "/tmp") /
                       ("input_file_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST_CASE("a regular file reads whole, and one over the cap is refused before reading") {
  const std::string dir = scratch("regular");
  std::ofstream(dir + "/f.bin", std::ios::binary) << "hello";
  CHECK(read_regular_file(dir + "/f.bin", "t", 5) == std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'});
  CHECK(read_regular_file(dir + "/f.bin", "t", 5).size() == 5);
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(dir + "/f.bin", "t", 4), IoError,
                             "[t] " + dir + "/f.bin: file is larger than the 4 bytes this reader "
                             "accepts (5 bytes)");
  std::ofstream(dir + "/empty.bin", std::ios::binary).flush();
  CHECK(read_regular_file(dir + "/empty.bin", "t", 5).empty());
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(dir + "/absent", "t", 5), IoError,
                             "[t] " + dir + "/absent: cannot open: No such file or directory");
}

TEST_CASE("FIFOs, devices and folders are refused at once, before any read") {
  const std::string dir = scratch("special");
  REQUIRE(::mkfifo((dir + "/pipe").c_str(), 0600) == 0);  // would block a plain open forever
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(dir + "/pipe", "idx", 100), IoError,
                             "[idx] " + dir + "/pipe: not a regular file (a FIFO)");
  CHECK_THROWS_WITH_FRAGMENT(InputFile(dir + "/pipe", "t"), IoError, "(a FIFO)");
  // /dev/zero never ends: reading it to a cap took seconds.
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file("/dev/zero", "cifar10", uint64_t{1} << 30), IoError,
                             "[cifar10] /dev/zero: not a regular file (a character device)");
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file("/dev/null", "t", 100), IoError,
                             "(a character device)");
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(dir, "t", 100), IoError,
                             dir + ": not a regular file (a directory)");
}

TEST_CASE("symbolic link loops and over-long paths are IoErrors with the OS's reason") {
  const std::string dir = scratch("loops");
  fs::create_symlink(dir + "/b", dir + "/a");
  fs::create_symlink(dir + "/a", dir + "/b");
  CHECK_THROWS_WITH_FRAGMENT(path_type(dir + "/a/file", "mnist"), IoError,
                             "[mnist] " + dir + "/a/file: cannot look it up: Too many levels of "
                             "symbolic links");
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(dir + "/a", "t", 10), IoError,
                             "cannot open: Too many levels of symbolic links");
  CHECK_THROWS_WITH_FRAGMENT(folder_entries(dir + "/a", "image_folder"), IoError,
                             "[image_folder] " + dir + "/a: cannot list the folder: Too many "
                             "levels of symbolic links");
  const std::string long_path = dir + "/" + std::string(5000, 'x');
  CHECK_THROWS_WITH_FRAGMENT(path_type(long_path, "t"), IoError, "File name too long");
  CHECK_THROWS_WITH_FRAGMENT(read_regular_file(long_path, "t", 10), IoError, "File name too long");
  // A folder entry that is a loop cannot be classified: an error, not a skip.
  const std::string listed = scratch("listed");
  fs::create_symlink(listed + "/loop", listed + "/loop");
  CHECK_THROWS_WITH_FRAGMENT(folder_entries(listed, "t"), IoError,
                             listed + "/loop: cannot look it up: Too many levels");
}

TEST_CASE("path_type and folder_entries: what is there, missing paths and dangling links") {
  const std::string dir = scratch("types");
  std::ofstream(dir + "/b.txt") << "x";
  fs::create_directory(dir + "/a");
  fs::create_symlink(dir + "/gone", dir + "/c.lnk");
  REQUIRE(::mkfifo((dir + "/d.pipe").c_str(), 0600) == 0);
  CHECK(path_type(dir + "/b.txt", "t") == fs::file_type::regular);
  CHECK(path_type(dir + "/absent", "t") == fs::file_type::not_found);
  CHECK(path_type(dir + "/b.txt/below", "t") == fs::file_type::not_found);
  const std::vector<FolderEntry> entries = folder_entries(dir, "t");
  REQUIRE(entries.size() == 4);
  CHECK(entries[0].path.filename() == "a");
  CHECK(entries[0].type == fs::file_type::directory);
  CHECK(entries[1].type == fs::file_type::regular);
  CHECK(entries[2].type == fs::file_type::not_found);  // dangling
  CHECK(entries[3].type == fs::file_type::fifo);
  CHECK(file_type_name(fs::file_type::fifo) == "a FIFO");
}

}  // namespace
}  // namespace loom
