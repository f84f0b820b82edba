// File: data/cifar.cc
// CIFAR-10 binary batches: validation of every record, loading, fixture writing.
#include "data/cifar.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/input_file.h"
#include "data/file_bytes.h"

// N images, C channels (R, G, B), H, W = 32
namespace loom::data {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kOfficialRecords = 10000;
constexpr int64_t kOfficialBatches = 5;
constexpr int64_t kPixelBytes = kCifarRecordBytes - 1;
constexpr uint64_t kMaxBatchBytes = uint64_t{256} << 20;
constexpr uint8_t kPickleProto = 0x80;  // the first opcode of a protocol 2+ pickle

bool is_official_name(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  if (name == "test_batch.bin") return true;
  for (int64_t b = 1; b <= kOfficialBatches; ++b) {
    if (name == fmt::format("data_batch_{}.bin", b)) return true;
  }
  return false;
}

// Whole records, no pickle, and (strict) the official size.
int64_t check_batch_size(std::span<const uint8_t> file, const std::string& path,
                         CifarOptions options) {
  LOOM_CHECK(!file.empty(), IoError,
             "[cifar10] {}: file is empty; expected records of {} bytes (1 label byte + "
             "3x32x32 pixels)",
             path, kCifarRecordBytes);
  const int64_t records = static_cast<int64_t>(file.size()) / kCifarRecordBytes;
  const int64_t left_over = static_cast<int64_t>(file.size()) % kCifarRecordBytes;
  // A pickle starts 80 <protocol 2-5>. Whole records starting 0x80 are a batch
  // with a bad first label, which decode_records reports as such.
  const bool pickle = file[0] == kPickleProto && file.size() >= 2 && file[1] >= 2 &&
                      file[1] <= 5 && left_over != 0;
  LOOM_CHECK(!pickle, IoError,
             "[cifar10] {}: starts {}, a Python pickle (the \"python version\" of CIFAR-10), "
             "which Loom never unpickles; download the binary version (cifar-10-binary.tar.gz) "
             "and pass its cifar-10-batches-bin folder",
             path, hex_prefix(file, 2));
  LOOM_CHECK(left_over == 0, IoError,
             "[cifar10] {}: size {} bytes is not a multiple of the {}-byte record (1 label + "
             "3x32x32 pixels): {} whole records and {} bytes left over (truncated file?)",
             path, file.size(), kCifarRecordBytes, records, left_over);
  const bool check_official = options.strict && is_official_name(path);
  LOOM_CHECK(!check_official || records == kOfficialRecords, IoError,
             "[cifar10] {}: size {} bytes ({} records); an official batch is exactly {} bytes "
             "({} records) (strict mode; pass {{.strict = false}} for subsets)",
             path, file.size(), records, kOfficialRecords * kCifarRecordBytes, kOfficialRecords);
  return records;
}

Dataset decode_records(std::span<const uint8_t> file, int64_t records, const std::string& path) {
  Dataset dataset{empty({records, kCifarChannels, kCifarSide, kCifarSide}, {.dtype = DType::UInt8}),
                  empty({records}, {.dtype = DType::Int64})};
  uint8_t* pixels = dataset.images.data_ptr<uint8_t>();
  int64_t* labels = dataset.labels.data_ptr<int64_t>();
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* record = file.data() + r * kCifarRecordBytes;
    LOOM_CHECK(record[0] < kCifarClasses, IoError,
               "[cifar10] {}: label {} out of range at record {} (offset {}); expected 0-9", path,
               record[0], r, r * kCifarRecordBytes);
    labels[r] = record[0];
    std::memcpy(pixels + r * kPixelBytes, record + 1, kPixelBytes);
  }
  return dataset;
}

// FNV-1a: enough to tell a copied batch file from a distinct one.
uint64_t fingerprint(std::span<const uint8_t> bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (uint8_t byte : bytes) hash = (hash ^ byte) * 1099511628211ull;
  return hash;
}

std::vector<std::string> batch_names(Split split) {
  if (split == Split::Test) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int64_t b = 1; b <= kOfficialBatches; ++b)
    names.push_back(fmt::format("data_batch_{}.bin", b));
  return names;
}

bool is_there(const fs::path& path) {
  return path_type(path.string(), "cifar10") != fs::file_type::not_found;
}

void check_present(const fs::path& folder, const std::string& name, Split split) {
  if (is_there(folder / name)) return;
  const std::string pickled = name.substr(0, name.size() - 4);  // without ".bin"
  const std::string hint = is_there(folder / pickled)
                               ? fmt::format(
                                     " ({} without .bin is there: that is the pickled "
                                     "python version; use the binary version)",
                                     pickled)
                               : "";
  throw IoError(fmt::format(
      "[cifar10] {}: {} is missing; the {} split needs {}{}", folder.string(), name,
      split_name(split),
      split == Split::Train ? "data_batch_1.bin .. data_batch_5.bin" : "test_batch.bin", hint));
}

// Strict mode, test split: 1000 images per class. (The official totals, 50000
// and 10000, need no check of their own: strict mode already demands the
// official batch files, each of exactly 10000 records.)
void check_class_balance(const Dataset& dataset, const std::string& folder) {
  const std::vector<int64_t> counts = class_counts(dataset, kCifarClasses);
  for (int64_t k = 0; k < kCifarClasses; ++k) {
    LOOM_CHECK(counts[k] == kOfficialRecords / kCifarClasses, IoError,
               "[cifar10] {}: class {} has {} test images; expected {} per class (strict mode)",
               folder, k, counts[k], kOfficialRecords / kCifarClasses);
  }
}

}  // namespace

Dataset parse_cifar_batch(std::span<const uint8_t> file, const std::string& path,
                          CifarOptions options) {
  return decode_records(file, check_batch_size(file, path, options), path);
}

Dataset read_cifar_batch(const std::string& path, CifarOptions options) {
  return parse_cifar_batch(read_file_bytes(path, "cifar10", kMaxBatchBytes), path, options);
}

Dataset load_cifar10(const std::string& folder, Split split, CifarOptions options) {
  std::vector<Dataset> parts;
  std::vector<std::pair<uint64_t, std::string>> seen;  // fingerprint, name
  for (const std::string& name : batch_names(split)) {
    check_present(fs::path(folder), name, split);
    const std::string path = (fs::path(folder) / name).string();
    const std::vector<uint8_t> file = read_file_bytes(path, "cifar10", kMaxBatchBytes);
    const uint64_t hash = fingerprint(file);
    for (const auto& [other_hash, other] : seen) {
      LOOM_CHECK(other_hash != hash, IoError,
                 "[cifar10] {}: {} is byte-identical to {} (a duplicated batch file)", folder, name,
                 other);
    }
    seen.emplace_back(hash, name);
    parts.push_back(parse_cifar_batch(file, path, options));
  }
  Dataset dataset = parts.size() == 1 ? parts[0] : concat(parts);
  if (options.strict && split == Split::Test) check_class_balance(dataset, folder);
  return dataset;
}

void write_cifar_batch(const std::string& path, const Dataset& dataset) {
  check_dataset(dataset, "write_cifar_batch");
  LOOM_CHECK(
      dataset.images.sizes() == Shape({dataset.size(), kCifarChannels, kCifarSide, kCifarSide}),
      ShapeError, "[write_cifar_batch] CIFAR-10 images are (N, 3, 32, 32), got {}",
      shape_str(dataset.images.sizes()));
  const uint8_t* pixels = dataset.images.data_ptr<uint8_t>();
  const int64_t* labels = dataset.labels.data_ptr<int64_t>();
  std::vector<uint8_t> file(static_cast<size_t>(dataset.size() * kCifarRecordBytes));
  for (int64_t r = 0; r < dataset.size(); ++r) {
    LOOM_CHECK(labels[r] >= 0 && labels[r] < kCifarClasses, ValueError,
               "[write_cifar_batch] label {} of sample {} is outside 0-9", labels[r], r);
    file[r * kCifarRecordBytes] = static_cast<uint8_t>(labels[r]);
    std::memcpy(&file[r * kCifarRecordBytes + 1], pixels + r * kPixelBytes, kPixelBytes);
  }
  write_file_bytes(path, file, /*gzip=*/false);
}

void save_cifar10(const std::string& folder, Split split, const Dataset& dataset) {
  const std::vector<std::string> names = batch_names(split);
  const int64_t parts = static_cast<int64_t>(names.size());
  LOOM_CHECK(dataset.size() >= parts, ValueError,
             "[save_cifar10] the {} split needs at least {} samples (one per batch file), got {}",
             split_name(split), parts, dataset.size());
  for (int64_t b = 0; b < parts; ++b) {
    const std::string path = (fs::path(folder) / names[b]).string();
    write_cifar_batch(path,
                      dataset.slice(b * dataset.size() / parts, (b + 1) * dataset.size() / parts));
  }
}

}  // namespace loom::data
