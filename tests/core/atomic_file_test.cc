// File: tests/core/atomic_file_test.cc
// AtomicFile on its own: a commit replaces the target, an abandoned write
// leaves it and no temporary file behind. (tests/core/serialize_test.cc covers
// failures mid-save and the clean-up of killed writers' leftovers.)
#include "core/atomic_file.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "tests/testing.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

fs::path scratch_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(base != nullptr ? base : fs::temp_directory_path().string()) /
                 (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_through(AtomicFile& file, const std::string& text) {
  file.write(text.data(), text.size());
}

size_t entries_in(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST_CASE("commit replaces the target; an uncommitted file leaves it untouched") {
  fs::path dir = scratch_dir("atomic_file_test");
  fs::path target = dir / "out.txt";
  {
    AtomicFile file(target.string(), "test");
    write_through(file, "first");
    file.commit();
  }
  CHECK(read_text(target) == "first");
  {
    AtomicFile file(target.string(), "test");
    write_through(file, "second, abandoned");
    CHECK(entries_in(dir) == 2);  // the target and our temporary file
  }
  CHECK(read_text(target) == "first");
  CHECK(entries_in(dir) == 1);
  fs::remove_all(dir);
}

TEST_CASE("a missing folder is an IoError naming the op and the path") {
  fs::path dir = scratch_dir("atomic_file_missing");
  std::string target = (dir / "no" / "such" / "out.txt").string();
  CHECK_THROWS_WITH_FRAGMENT(AtomicFile(target, "myop"), IoError,
                             "[myop] " + target + ": cannot create a temporary file");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
