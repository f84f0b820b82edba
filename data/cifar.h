// File: data/cifar.h
// CIFAR-10 binary batches (cs.toronto.edu/~kriz/cifar.html, "binary version"):
// records of 1 label byte then 3072 pixels (the 1024 R, G and B values of a
// 32x32 image, each plane row-major), so a record is one (C, H, W) image.
//
//   auto train = loom::data::load_cifar10("/data/cifar-10-batches-bin", Split::Train);
//   train.images;  // (50000, 3, 32, 32) uint8
//
// Every malformed-file case that applies to extracted batches (an empty file,
// the Python pickle version, a size that is not whole records or not a batch's,
// a label out of range, a missing or duplicated batch) is rejected with
// loom::IoError naming the file, the offset or field and what was expected.
// (Archive checksums and tar members do not apply: Loom reads the extracted .bin
// files, never the archive.)
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "data/dataset.h"

namespace loom::data {

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarChannels = 3;
constexpr int64_t kCifarClasses = 10;
constexpr int64_t kCifarRecordBytes = 1 + kCifarChannels * kCifarSide * kCifarSide;  // 3073

struct CifarOptions {
  // The checks only the official files pass: each data_batch_N.bin and
  // test_batch.bin is exactly 30,730,000 bytes (10000 records, so the splits
  // total 50000 and 10000), and the test split has 1000 images per class. Off
  // by default, so subsets and small generated fixtures load; the other checks
  // (record size, labels, missing or duplicate files, pickles) always apply.
  bool strict = false;
};

// One batch file. The strict size check applies when its name is
// data_batch_N.bin or test_batch.bin.
Dataset read_cifar_batch(const std::string& path, CifarOptions options = {});
// The same for a batch file's bytes; `path` names it in errors (and, in strict
// mode, decides whether it is an official batch).
Dataset parse_cifar_batch(std::span<const uint8_t> file, const std::string& path,
                          CifarOptions options = {});

// data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin (test) from
// `folder`. Throws IoError when a file is missing or is a byte-identical copy of
// another batch (a duplicate).
Dataset load_cifar10(const std::string& folder, Split split, CifarOptions options = {});

// Writes `dataset` (images (N, 3, 32, 32), labels in 0-9) as one batch file.
void write_cifar_batch(const std::string& path, const Dataset& dataset);
// Writes `dataset` under the official names: the train split as five batches
// of near-equal size (N >= 5), the test split as test_batch.bin.
void save_cifar10(const std::string& folder, Split split, const Dataset& dataset);

}  // namespace loom::data
