// File: training/user_path.cc
// Resolving the user's relative paths against their directory, under bazel run too.
#include "training/user_path.h"

#include <cstdlib>
#include <filesystem>

namespace loom::training {

std::string user_path(const std::string& path, const char* working_directory) {
  if (path.empty() || working_directory == nullptr || *working_directory == '\0') return path;
  if (std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(working_directory) / path).string();
}

std::string user_path(const std::string& path) {
  return user_path(path, std::getenv("BUILD_WORKING_DIRECTORY"));
}

}  // namespace loom::training
