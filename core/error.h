// File: core/error.h
// Loom's one exception hierarchy. Every public op validates its arguments once and
// throws one of these with a message of the form
//   [op] what is wrong, with the values (and the fix, where one is known)
// Messages quote names and text read from files, so the constructor passes
// them through printable() (core/utf8.h): what() never holds a NUL, a control
// character or invalid UTF-8 from a corrupt file.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
  explicit Error(const char* message);
};

// Argument values out of range (negative sizes, bad stride, unknown reduction...).
class ValueError : public Error {
  using Error::Error;
};
// Shapes that disagree.
class ShapeError : public Error {
  using Error::Error;
};
// A dtype the op does not support, or dtypes that disagree.
class TypeError : public Error {
  using Error::Error;
};
// Tensors on different devices, or a device this build cannot use.
class DeviceError : public Error {
  using Error::Error;
};
// An index out of bounds.
class IndexError : public Error {
  using Error::Error;
};
// Misuse of the autograd engine (backward twice, in-place on a leaf, ...).
class AutogradError : public Error {
  using Error::Error;
};
// A failed CUDA runtime, cuDNN or cuBLAS call.
class CudaError : public Error {
  using Error::Error;
};
class CudnnError : public CudaError {
  using CudaError::CudaError;
};
class OutOfMemoryError : public CudaError {
  using CudaError::CudaError;
};
// A failed oneDNN call (the CPU's fast tier, core/onednn).
class OnednnError : public Error {
  using Error::Error;
};
// A collective between processes that failed: a peer that died or stalled past
// the timeout, or a failed MPI or NCCL call (loom::distributed).
class DistError : public Error {
  using Error::Error;
};
// A value that must be finite is NaN or +-inf (a training loss).
class NonFiniteError : public Error {
  using Error::Error;
};
// Files: unreadable, truncated or malformed.
class IoError : public Error {
  using Error::Error;
};

}  // namespace loom

// Throws `Kind` with a fmt-formatted message when `cond` is false. The message
// arguments are evaluated only on failure, so shape printing costs nothing on
// the happy path.
#define LOOM_CHECK(cond, Kind, ...)                  \
  do {                                               \
    if (!(cond)) throw Kind(fmt::format(__VA_ARGS__)); \
  } while (0)
