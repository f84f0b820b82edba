// File: data/idx.cc
// IDX parsing with a specific error for every malformed case, and MNIST loading.
#include "data/idx.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/input_file.h"
#include "data/file_bytes.h"

// N images, H rows, W cols
namespace loom::data {

namespace {

constexpr size_t kMagicBytes = 4;
constexpr int64_t kMnistSide = 28;
constexpr int64_t kMnistClasses = 10;

bool is_idx_type(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::UInt8:
    case IdxType::Int8:
    case IdxType::Int16:
    case IdxType::Int32:
    case IdxType::Float32:
    case IdxType::Float64:
      return true;
  }
  return false;
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

void write_be32(uint8_t* p, uint32_t value) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(value >> (24 - 8 * i));
}

std::string dims_str(const std::vector<int64_t>& dims) {
  return fmt::format("({})", fmt::join(dims, ", "));
}

// The magic number: rejects short files, gzip data, byte-swapped headers, a
// non-zero prefix and unknown type codes, in that order (each has its own fix).
void check_magic(std::span<const uint8_t> file, const std::string& path) {
  LOOM_CHECK(file.size() >= kMagicBytes, IoError,
             "[idx] {}: file is {} bytes; an IDX file starts with a 4-byte magic number "
             "00 00 <type> <ndim>",
             path, file.size());
  LOOM_CHECK(!starts_with_gzip_magic(file), IoError,
             "[idx] {}: starts 1F 8B, a gzip stream that was never decompressed; gunzip it, "
             "or give it a name ending in .gz so it is decompressed on load",
             path);
  const bool swapped = file[2] == 0 && file[3] == 0 && is_idx_type(file[1]);
  LOOM_CHECK(!swapped, IoError,
             "[idx] {}: byte-swapped (little-endian) header: magic reads 0x{:08X}; expected "
             "0x{:08X}",
             path, read_be32(file.data()), __builtin_bswap32(read_be32(file.data())));
  LOOM_CHECK(file[0] == 0 && file[1] == 0, IoError,
             "[idx] {}: magic bytes 0-1 are {}; expected 00 00 (is this an IDX file?)", path,
             hex_prefix(file, 2));
  LOOM_CHECK(is_idx_type(file[2]), IoError,
             "[idx] {}: element type code 0x{:02X} at offset 2 is not an IDX type; expected "
             "0x08 (uint8), 0x09 (int8), 0x0B (int16), 0x0C (int32), 0x0D (float32) or "
             "0x0E (float64)",
             path, file[2]);
  LOOM_CHECK(file[3] > 0, IoError, "[idx] {}: ndim is 0 at offset 3; expected at least 1 dimension",
             path);
}

// The dims after the magic number, each >= 1, and the payload size they imply.
std::vector<int64_t> read_dims(std::span<const uint8_t> file, const std::string& path,
                               size_t element_size, uint64_t* payload_bytes) {
  const size_t ndim = file[3];
  const size_t header = kMagicBytes + 4 * ndim;
  LOOM_CHECK(file.size() >= header, IoError,
             "[idx] {}: header cut short: ndim {} needs {} header bytes, the file has {}", path,
             ndim, header, file.size());
  std::vector<int64_t> dims;
  uint64_t bytes = element_size;
  for (size_t d = 0; d < ndim; ++d) {
    const size_t offset = kMagicBytes + 4 * d;
    const uint32_t dim = read_be32(file.data() + offset);
    LOOM_CHECK(dim > 0, IoError, "[idx] {}: dim {} (offset {}) is 0; expected at least 1", path, d,
               offset);
    LOOM_CHECK(!__builtin_mul_overflow(bytes, uint64_t{dim}, &bytes), IoError,
               "[idx] {}: the product of the dims overflows 64 bits at dim {} (offset {}, "
               "value {})",
               path, d, offset, dim);
    dims.push_back(dim);
  }
  *payload_bytes = bytes;
  return dims;
}

// The largest header: the magic number and 255 dims.
constexpr size_t kMaxHeaderBytes = kMagicBytes + 4 * 255;

// What the header at the start of `prefix` promises, checked before the rest of
// a .gz file is inflated: a header declaring more than kMaxIdxBytes fails now
// instead of after inflating up to the cap. Returns the file size the header
// declares, past which inflating stops; kMaxIdxBytes for a malformed header,
// which parse_idx names the problem of.
uint64_t check_declared_size(std::span<const uint8_t> prefix, const std::string& path) {
  if (prefix.size() < kMagicBytes || prefix[0] != 0 || prefix[1] != 0 || !is_idx_type(prefix[2]))
    return kMaxIdxBytes;
  const size_t ndim = prefix[3];
  const size_t header = kMagicBytes + 4 * ndim;
  if (ndim == 0 || prefix.size() < header) return kMaxIdxBytes;
  std::vector<int64_t> dims;
  uint64_t bytes = idx_element_size(static_cast<IdxType>(prefix[2]));
  bool malformed = false;
  for (size_t d = 0; d < ndim; ++d) {
    dims.push_back(read_be32(prefix.data() + kMagicBytes + 4 * d));
    malformed |= dims.back() == 0 ||
                 __builtin_mul_overflow(bytes, static_cast<uint64_t>(dims.back()), &bytes);
  }
  if (malformed) return kMaxIdxBytes;  // parse_idx names the dim
  // Compared without adding: header + bytes wraps for a product near 2^64.
  LOOM_CHECK(bytes <= kMaxIdxBytes - header, IoError,
             "[idx] {}: the header declares dims {} of {} = {} bytes, more than the {} bytes this "
             "reader accepts (rejected before decompressing)",
             path, dims_str(dims), idx_type_name(static_cast<IdxType>(prefix[2])), bytes,
             kMaxIdxBytes);
  return header + bytes;
}

// IDX stores multi-byte elements big-endian; the array holds them in host order.
void to_host_order(std::vector<uint8_t>& bytes, size_t element_size) {
  if (element_size == 1 || std::endian::native == std::endian::big) return;
  for (size_t i = 0; i < bytes.size(); i += element_size) {
    std::reverse(bytes.begin() + i, bytes.begin() + i + element_size);
  }
}

std::string find_mnist_file(const std::string& folder, const std::string& name) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {name, name + ".gz"}) {
    const std::string path = (fs::path(folder) / candidate).string();
    if (path_type(path, "mnist") != fs::file_type::not_found) return path;
  }
  throw IoError(
      fmt::format("[mnist] {}: neither {} nor {}.gz exists; expected the MNIST file names "
                  "(train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                  "t10k-labels-idx1-ubyte, each plain or .gz)",
                  folder, name, name));
}

std::string mnist_name(Split split, bool images) {
  return fmt::format("{}-{}", split == Split::Train ? "train" : "t10k",
                     images ? "images-idx3-ubyte" : "labels-idx1-ubyte");
}

void check_uint8(const IdxArray& array, const std::string& path) {
  LOOM_CHECK(array.type == IdxType::UInt8, IoError,
             "[mnist] {}: element type (offset 2) is {} (0x{:02X}); MNIST files hold uint8 "
             "(0x08)",
             path, idx_type_name(array.type), static_cast<int>(array.type));
}

Tensor mnist_images(const IdxArray& array, const std::string& path) {
  check_uint8(array, path);
  LOOM_CHECK(array.dims.size() == 3, IoError,
             "[mnist] {}: images have {} dims {}; expected 3 (count, rows, cols)", path,
             array.dims.size(), dims_str(array.dims));
  LOOM_CHECK(array.dims[1] == kMnistSide && array.dims[2] == kMnistSide, IoError,
             "[mnist] {}: images are {}x{} (rows x cols, offsets 8 and 12); MNIST images are "
             "28x28",
             path, array.dims[1], array.dims[2]);
  const int64_t n = array.dims[0];
  return from_host(array.bytes.data(), DType::UInt8, {n, 1, kMnistSide, kMnistSide},
                   {.dtype = DType::UInt8});
}

Tensor mnist_labels(const IdxArray& array, const std::string& path) {
  check_uint8(array, path);
  LOOM_CHECK(array.dims.size() == 1, IoError,
             "[mnist] {}: labels have {} dims {}; expected 1 (count)", path, array.dims.size(),
             dims_str(array.dims));
  const size_t header = kMagicBytes + 4;
  for (size_t i = 0; i < array.bytes.size(); ++i) {
    LOOM_CHECK(array.bytes[i] < kMnistClasses, IoError,
               "[mnist] {}: label {} at index {} (offset {}); expected 0-9", path, array.bytes[i],
               i, header + i);
  }
  return from_host(array.bytes.data(), DType::UInt8, {array.dims[0]}, {.dtype = DType::Int64});
}

}  // namespace

std::string_view idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::UInt8:
      return "uint8";
    case IdxType::Int8:
      return "int8";
    case IdxType::Int16:
      return "int16";
    case IdxType::Int32:
      return "int32";
    case IdxType::Float32:
      return "float32";
    case IdxType::Float64:
      return "float64";
  }
  return "unknown";
}

size_t idx_element_size(IdxType type) {
  switch (type) {
    case IdxType::UInt8:
    case IdxType::Int8:
      return 1;
    case IdxType::Int16:
      return 2;
    case IdxType::Int32:
    case IdxType::Float32:
      return 4;
    case IdxType::Float64:
      return 8;
  }
  return 1;
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// Every check of parse_idx; the type and dims of the file, without its payload,
// which starts at `*header`.
IdxArray checked_header(std::span<const uint8_t> file, const std::string& path, size_t* header) {
  check_magic(file, path);
  IdxArray array;
  array.type = static_cast<IdxType>(file[2]);
  uint64_t payload = 0;
  array.dims = read_dims(file, path, idx_element_size(array.type), &payload);
  *header = kMagicBytes + 4 * array.dims.size();
  const uint64_t available = file.size() - *header;
  LOOM_CHECK(available >= payload, IoError,
             "[idx] {}: payload is {} bytes but the header declares dims {} of {} = {} bytes "
             "(the file is truncated)",
             path, available, dims_str(array.dims), idx_type_name(array.type), payload);
  LOOM_CHECK(available == payload, IoError,
             "[idx] {}: {} trailing bytes after the {}-byte payload of dims {}; expected the "
             "file to end at offset {}",
             path, available - payload, payload, dims_str(array.dims), *header + payload);
  return array;
}

}  // namespace

IdxArray parse_idx(std::span<const uint8_t> file, const std::string& path) {
  size_t header = 0;
  IdxArray array = checked_header(file, path, &header);
  array.bytes.assign(file.begin() + header, file.end());
  to_host_order(array.bytes, idx_element_size(array.type));
  return array;
}

IdxArray parse_idx(std::vector<uint8_t>&& file, const std::string& path) {
  size_t header = 0;
  IdxArray array = checked_header(file, path, &header);
  // Shifting the payload down in place beats a fresh 47 MB buffer (MNIST's
  // training images), whose every page would fault in on the copy.
  file.erase(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(header));
  array.bytes = std::move(file);
  to_host_order(array.bytes, idx_element_size(array.type));
  return array;
}

IdxArray read_idx(const std::string& path) {
  if (!ends_with(path, ".gz")) return parse_idx(read_file_bytes(path, "idx", kMaxIdxBytes), path);
  // The compressed file is capped like a plain one: IDX data never shrinks below its size.
  return parse_idx_gzip(read_stored_bytes(path, "idx", kMaxIdxBytes), path);
}

IdxArray parse_idx_gzip(std::span<const uint8_t> packed, const std::string& path) {
  const PrefixCheck declared{kMaxHeaderBytes, [&path](std::span<const uint8_t> prefix) {
                               return check_declared_size(prefix, path);
                             }};
  return parse_idx(gunzip_bytes(packed, path, "idx", kMaxIdxBytes, declared), path);
}

std::vector<uint8_t> encode_idx(const IdxArray& array) {
  LOOM_CHECK(!array.dims.empty() && array.dims.size() <= 255, ValueError,
             "[encode_idx] an IDX array has 1 to 255 dims, got {}", array.dims.size());
  const size_t element_size = idx_element_size(array.type);
  LOOM_CHECK(array.bytes.size() == static_cast<size_t>(array.numel()) * element_size, ValueError,
             "[encode_idx] dims {} of {} need {} bytes, got {}", dims_str(array.dims),
             idx_type_name(array.type), array.numel() * element_size, array.bytes.size());
  std::vector<uint8_t> file(kMagicBytes + 4 * array.dims.size());
  file[2] = static_cast<uint8_t>(array.type);
  file[3] = static_cast<uint8_t>(array.dims.size());
  for (size_t d = 0; d < array.dims.size(); ++d) {
    write_be32(file.data() + kMagicBytes + 4 * d, static_cast<uint32_t>(array.dims[d]));
  }
  std::vector<uint8_t> payload = array.bytes;
  to_host_order(payload, element_size);  // the same swap turns host order into big-endian
  file.insert(file.end(), payload.begin(), payload.end());
  return file;
}

void write_idx(const std::string& path, const IdxArray& array) {
  write_file_bytes(path, encode_idx(array), ends_with(path, ".gz"));
}

Dataset load_mnist(const std::string& folder, Split split) {
  const std::string images_path = find_mnist_file(folder, mnist_name(split, true));
  const std::string labels_path = find_mnist_file(folder, mnist_name(split, false));
  Dataset dataset{mnist_images(read_idx(images_path), images_path),
                  mnist_labels(read_idx(labels_path), labels_path)};
  LOOM_CHECK(dataset.images.size(0) == dataset.labels.size(0), IoError,
             "[mnist] {}: {} images in {} but {} labels in {} (dim 0, offset 4); the counts "
             "must agree",
             folder, dataset.images.size(0), images_path, dataset.labels.size(0), labels_path);
  return dataset;
}

void save_mnist(const std::string& folder, Split split, const Dataset& dataset, bool gzip) {
  check_dataset(dataset, "save_mnist");
  LOOM_CHECK(
      dataset.channels() == 1 && dataset.height() == kMnistSide && dataset.width() == kMnistSide,
      ShapeError, "[save_mnist] MNIST images are (N, 1, 28, 28), got {}",
      shape_str(dataset.images.sizes()));
  const std::string suffix = gzip ? ".gz" : "";
  const uint8_t* pixels = dataset.images.data_ptr<uint8_t>();
  IdxArray images{IdxType::UInt8,
                  {dataset.size(), kMnistSide, kMnistSide},
                  {pixels, pixels + dataset.images.numel()}};
  std::vector<int64_t> values = dataset.labels.to_vector<int64_t>();
  IdxArray labels{IdxType::UInt8, {dataset.size()}, {values.begin(), values.end()}};
  namespace fs = std::filesystem;
  write_idx((fs::path(folder) / (mnist_name(split, true) + suffix)).string(), images);
  write_idx((fs::path(folder) / (mnist_name(split, false) + suffix)).string(), labels);
}

}  // namespace loom::data
