// File: core/safetensors.h
// Safetensors files: what Python's `safetensors.torch` reads and writes, so a
// Loom state_dict loads into PyTorch and back.
//
//   loom::save_safetensors("model.safetensors", net.state_dict());
//   net.load_state_dict(loom::load_safetensors("model.safetensors"));
//
// The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON
//   {"__metadata__": {"k": "v"}, "fc.weight": {"dtype": "F32", "shape": [5, 4],
//    "data_offsets": [0, 80]}, ...}
// padded with spaces to a multiple of 8, then every tensor's bytes, row-major,
// little-endian, packed back to back with no gaps.
//
// Loading is strict: every malformed file (header too small or too large, not
// UTF-8, not JSON, overlapping or gapped offsets, sizes that disagree with the
// shape, overflowing shapes, trailing or missing bytes, unknown dtypes,
// duplicate names, non-string metadata) is an IoError naming the file and what
// is wrong. Saving is atomic (core/atomic_file.h): a crash mid-save never loses
// the old file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "core/state_dict.h"

namespace loom {

// Writes `tensors` (any device, dtype, strides; saved contiguous, in this
// order) and string metadata. Throws ValueError for bad arguments (undefined
// tensors, duplicate or reserved names, names that are not UTF-8) and IoError
// for filesystem failures; either way an existing file at `path` is untouched.
void save_safetensors(const std::string& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor, in file order, onto `device`. Dtypes: F32, F64, F16, BF16,
// I32, I64, U8, BOOL.
StateDict load_safetensors(const std::string& path, Device device = Device::cpu());

// The safetensors name of a dtype: "F32", "F64", "F16", "BF16", "I32", "I64", "U8", "BOOL".
std::string_view safetensors_dtype(DType dtype);

// The "__metadata__" strings of a safetensors file (reads and checks the whole
// header, not the data).
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);

// Throws IoError naming `path` when a save there would fail for its folder
// (missing, not writable, a directory in the way); writes nothing. Lets a
// trainer refuse a bad --save at start-up instead of after its first epoch.
void check_save_path(const std::string& path);

}  // namespace loom
