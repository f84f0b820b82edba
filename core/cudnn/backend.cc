// File: core/cudnn/backend.cc
// RAII over cuDNN backend descriptors, typed attribute setters, the cuDNN check.
#include "core/cudnn/backend.h"

#include <fmt/format.h>

#include <utility>

#include "core/error.h"

namespace loom::cudnn {

std::string last_error_string() {
  char message[1024] = {0};
  cudnnGetLastErrorString(message, sizeof message);
  return message;
}

void check_status(cudnnStatus_t status, const char* statement, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::string detail = last_error_string();
  throw CudnnError(fmt::format("[cudnn] {} failed at {}:{}: {} ({}){}{}", statement, file, line,
                               cudnnGetErrorString(status), static_cast<int>(status),
                               detail.empty() ? "" : ": ", detail));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  LOOM_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &raw_));
}

Descriptor::~Descriptor() {
  if (raw_ != nullptr) cudnnBackendDestroyDescriptor(raw_);
}

Descriptor::Descriptor(Descriptor&& other) noexcept
    : raw_(std::exchange(other.raw_, nullptr)) {}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (raw_ != nullptr) cudnnBackendDestroyDescriptor(raw_);
    raw_ = std::exchange(other.raw_, nullptr);
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* values) {
  LOOM_CUDNN_CHECK(cudnnBackendSetAttribute(raw_, name, type, count, values));
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_int64s(cudnnBackendAttributeName_t name, std::span<const int64_t> values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_bool(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::set_float(cudnnBackendAttributeName_t name, float value) {
  return set(name, CUDNN_TYPE_FLOAT, 1, &value);
}

Descriptor& Descriptor::set_double(cudnnBackendAttributeName_t name, double value) {
  return set(name, CUDNN_TYPE_DOUBLE, 1, &value);
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Descriptor& Descriptor::set_descriptors(cudnnBackendAttributeName_t name,
                                        const std::vector<const Descriptor*>& values) {
  std::vector<cudnnBackendDescriptor_t> raws;
  for (const Descriptor* d : values) raws.push_back(d->get());
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raws.size()), raws.data());
}

void Descriptor::finalize() { LOOM_CUDNN_CHECK(cudnnBackendFinalize(raw_)); }

cudnnStatus_t Descriptor::try_finalize() { return cudnnBackendFinalize(raw_); }

int64_t Descriptor::get_int64(cudnnBackendAttributeName_t name) const {
  int64_t value = 0, count = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(raw_, name, CUDNN_TYPE_INT64, 1, &count, &value));
  return value;
}

}  // namespace loom::cudnn
