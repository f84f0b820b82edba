// File: core/error.cc
// The base exception's constructors: every message made printable once, here.
#include "core/error.h"

#include "core/utf8.h"

namespace loom {

Error::Error(const std::string& message) : std::runtime_error(printable(message)) {}

Error::Error(const char* message) : Error(std::string(message)) {}

}  // namespace loom
