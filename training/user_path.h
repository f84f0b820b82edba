// File: training/user_path.h
// Under `bazel run` a program starts inside its runfiles tree, and Bazel names
// the directory the user typed the command in as BUILD_WORKING_DIRECTORY. The
// examples read every path the user gives relative to that directory.
#pragma once

#include <string>

namespace loom::training {

// `path` made relative to `working_directory` when it is relative and the
// directory is given (null or "": `path` unchanged); "" stays "".
std::string user_path(const std::string& path, const char* working_directory);

// user_path(path, getenv("BUILD_WORKING_DIRECTORY")).
std::string user_path(const std::string& path);

}  // namespace loom::training
