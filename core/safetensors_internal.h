// File: core/safetensors_internal.h
// The pieces of the safetensors reader and writer that training checkpoints
// (core/checkpoint.cc) build on: a checkpoint is a safetensors file whose
// header and data also feed two CRC-32s. Private to //core:serialize.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/input_file.h"
#include "core/state_dict.h"
#include "core/tensor.h"

namespace loom::safetensors_internal {

// One tensor's line in the header. Offsets count from the end of the header.
struct Entry {
  std::string name;
  std::string code;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
  DType dtype = DType::Float32;  // set once the entry is validated
};

struct Header {
  std::vector<Entry> entries;  // in data order once validated
  std::map<std::string, std::string> metadata;
};

// The header as the Rust crate writes it: compact, __metadata__ first (when
// there is any), then the tensors in data order. Unpadded.
std::string header_json(const std::vector<Entry>& entries,
                        const std::map<std::string, std::string>& metadata);

uint32_t crc32_of(uint32_t crc, const void* data, uint64_t nbytes);

// --- reading ---------------------------------------------------------------------

// Reads and validates the header, leaving the file at the first data byte.
Header read_header(InputFile& file);

// Reads the data section (the file must be at its start) into CPU tensors, in
// data order; `crc` accumulates its CRC-32 when given.
StateDict read_tensors(InputFile& file, const Header& header, uint32_t* crc);

StateDict to_device(StateDict tensors, Device device);

// --- writing ---------------------------------------------------------------------

// A tensor ready to write: dense, on the CPU, no history.
struct OutTensor {
  Entry entry;
  Tensor data;
};

// Checks names (defined, unique, not reserved, UTF-8; `op` names the caller in
// errors) and lays the tensors out back to back.
std::vector<OutTensor> prepare(const StateDict& tensors, std::string_view op);
std::vector<Entry> entries_of(const std::vector<OutTensor>& tensors);
void check_metadata(const std::map<std::string, std::string>& metadata, std::string_view op);

// Writes the file atomically.
void write_file(const std::string& path, const std::vector<OutTensor>& tensors,
                const std::map<std::string, std::string>& metadata);

}  // namespace loom::safetensors_internal
