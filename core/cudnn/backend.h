// File: core/cudnn/backend.h
// RAII over cuDNN's backend (Graph API) descriptors, with typed attribute
// setters, and the check macro for every cuDNN call. Nothing here knows about
// tensors or layers; graph.h builds operation graphs from these.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace loom::cudnn {

// Throws CudnnError naming the statement, file:line, the status and cuDNN's
// last error string, unless status is CUDNN_STATUS_SUCCESS.
void check_status(cudnnStatus_t status, const char* statement, const char* file, int line);

// cuDNN's own explanation of the last failure ("" when it has none).
std::string last_error_string();

class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept;
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return raw_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  int64_t count, const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set_int64s(cudnnBackendAttributeName_t name, std::span<const int64_t> values);
  Descriptor& set_bool(cudnnBackendAttributeName_t name, bool value);
  Descriptor& set_float(cudnnBackendAttributeName_t name, float value);
  Descriptor& set_double(cudnnBackendAttributeName_t name, double value);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_descriptors(cudnnBackendAttributeName_t name,
                              const std::vector<const Descriptor*>& values);
  template <class Enum>
  Descriptor& set_enum(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       Enum value) {
    return set(name, type, 1, &value);
  }

  // Throws CudnnError on failure.
  void finalize();
  // Returns the status instead: NOT_SUPPORTED is normal flow when probing engines.
  cudnnStatus_t try_finalize();

  int64_t get_int64(cudnnBackendAttributeName_t name) const;

 private:
  cudnnBackendDescriptor_t raw_ = nullptr;
};

}  // namespace loom::cudnn

#define LOOM_CUDNN_CHECK(statement) \
  ::loom::cudnn::check_status((statement), #statement, __FILE__, __LINE__)
