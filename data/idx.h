// File: data/idx.h
// The IDX format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist): a
// big-endian header `00 00 <type> <ndim>`, ndim 4-byte big-endian sizes, then
// the row-major payload. Files may be plain or gzip-compressed (name ends .gz).
//
//   auto train = loom::data::load_mnist("/usr/share/datasets/fashion-mnist", Split::Train);
//   auto labels = loom::data::read_idx("t10k-labels-idx1-ubyte.gz");  // type UInt8, dims {10000}
//
// Every malformed file (a bad or byte-swapped magic, a gzip stream left
// compressed, a cut-short header, zero or overflowing dims, a payload shorter or
// longer than the dims declare) is rejected with loom::IoError naming the file,
// the offset or field and what was expected, e.g.
//   [idx] /x/train-images-idx3-ubyte.gz: byte-swapped (little-endian) header:
//   magic reads 0x03080000; expected 0x00000803
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace loom::data {

// The element type codes of byte 2 of the magic number.
enum class IdxType : uint8_t {
  UInt8 = 0x08,
  Int8 = 0x09,
  Int16 = 0x0B,
  Int32 = 0x0C,
  Float32 = 0x0D,
  Float64 = 0x0E,
};
std::string_view idx_type_name(IdxType type);  // "uint8", ...
size_t idx_element_size(IdxType type);

struct IdxArray {
  IdxType type = IdxType::UInt8;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // row-major payload in host byte order

  int64_t numel() const;
};

// The largest IDX file (after decompression) the readers accept: 1 GiB.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;

// Reads and validates one IDX file (gunzipped when the name ends in .gz).
IdxArray read_idx(const std::string& path);
// Validates the bytes of an IDX file; `path` only names the file in errors.
IdxArray parse_idx(std::span<const uint8_t> file, const std::string& path);
// The same, taking the file's buffer for the payload instead of copying it.
IdxArray parse_idx(std::vector<uint8_t>&& file, const std::string& path);
// The same for a gzipped IDX file's bytes; a header declaring more than
// kMaxIdxBytes is rejected before the payload is inflated.
IdxArray parse_idx_gzip(std::span<const uint8_t> packed, const std::string& path);

// The file bytes of `array` (big-endian header and payload), and a writer that
// gzips when the name ends in .gz. For fixtures and for converting data sets.
std::vector<uint8_t> encode_idx(const IdxArray& array);
void write_idx(const std::string& path, const IdxArray& array);

// The MNIST file names in `folder`, plain or with .gz: train-images-idx3-ubyte
// and train-labels-idx1-ubyte, or t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte.
// Images must be uint8 (count, 28, 28), labels uint8 (count,) in 0-9, with equal
// counts (any count: subsets and test fixtures load too). The result has images
// (N, 1, 28, 28).
Dataset load_mnist(const std::string& folder, Split split);
// Writes `dataset` (images (N, 1, 28, 28)) under the MNIST names, gzipped or not.
void save_mnist(const std::string& folder, Split split, const Dataset& dataset, bool gzip);

}  // namespace loom::data
