// File: core/checkpoint.cc
// Training checkpoints: a safetensors file of "model.*", "optimizer.*" and
// "scheduler.*" tensors whose __metadata__ carries the scalars and two CRC-32s.
#include "core/checkpoint.h"

#include <fmt/format.h>

#include <charconv>
#include <limits>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/safetensors_internal.h"

namespace loom {

// A checkpoint is a safetensors file: these are the reader's and writer's parts.
using safetensors_internal::check_metadata;
using safetensors_internal::crc32_of;
using safetensors_internal::entries_of;
using safetensors_internal::Entry;
using safetensors_internal::Header;
using safetensors_internal::header_json;
using safetensors_internal::OutTensor;
using safetensors_internal::prepare;
using safetensors_internal::read_header;
using safetensors_internal::read_tensors;
using safetensors_internal::to_device;
using safetensors_internal::write_file;

namespace {

constexpr std::string_view kModelPrefix = "model.", kOptimizerPrefix = "optimizer.",
                           kSchedulerPrefix = "scheduler.", kExtraPrefix = "extra.";
// Format 2 gave the LR schedule its own section; format 1 files still load.
constexpr std::string_view kFormatKey = "loom.checkpoint", kFormatVersion = "2",
                           kFormatVersion1 = "1";
// Where format 1's trainer kept the schedule: inside the optimizer section.
constexpr std::string_view kVersion1SchedulePrefix = "schedule.";
constexpr std::string_view kEpochKey = "loom.epoch", kStepKey = "loom.step",
                           kSeedKey = "loom.rng_seed", kOffsetKey = "loom.rng_offset";
// data_crc32 is the CRC-32 of the data section (zlib.crc32 of the bytes after the
// header). header_crc32 covers the rest of the header (names, dtypes, shapes,
// offsets, metadata), recomputed from what was parsed, so a flipped digit in
// "loom.epoch" is caught too.
constexpr std::string_view kDataCrcKey = "loom.data_crc32", kHeaderCrcKey = "loom.header_crc32";

std::string crc_text(uint32_t crc) { return fmt::format("{:08x}", crc); }

uint32_t header_crc(const std::vector<Entry>& entries,
                    std::map<std::string, std::string> metadata) {
  metadata.erase(std::string(kDataCrcKey));
  metadata.erase(std::string(kHeaderCrcKey));
  std::string text = header_json(entries, metadata);
  return crc32_of(0, text.data(), text.size());
}

StateDict prefixed(const TrainingCheckpoint& checkpoint) {
  StateDict all;
  auto add = [&all](std::string_view prefix, const StateDict& section) {
    for (const auto& [name, t] : section) all.emplace_back(std::string(prefix) + name, t);
  };
  add(kModelPrefix, checkpoint.model);
  add(kOptimizerPrefix, checkpoint.optimizer);
  add(kSchedulerPrefix, checkpoint.scheduler);
  return all;
}

std::map<std::string, std::string> checkpoint_metadata(const TrainingCheckpoint& checkpoint) {
  std::map<std::string, std::string> metadata = {
      {std::string(kFormatKey), std::string(kFormatVersion)},
      {std::string(kEpochKey), std::to_string(checkpoint.epoch)},
      {std::string(kStepKey), std::to_string(checkpoint.step)},
      {std::string(kSeedKey), std::to_string(checkpoint.rng_seed)},
      {std::string(kOffsetKey), std::to_string(checkpoint.rng_offset)},
  };
  for (const auto& [key, value] : checkpoint.extra)
    metadata[std::string(kExtraPrefix) + key] = value;
  return metadata;
}

const std::string& required(const std::map<std::string, std::string>& metadata,
                            std::string_view key, std::string_view path) {
  auto it = metadata.find(std::string(key));
  LOOM_CHECK(it != metadata.end(), IoError,
             "[checkpoint] {}: __metadata__ has no '{}' (is this a Loom training checkpoint? a "
             "plain state_dict loads with load_safetensors)",
             path, key);
  return it->second;
}

template <class Int>
Int metadata_int(const std::map<std::string, std::string>& metadata, std::string_view key,
                 std::string_view path, int base = 10) {
  const std::string& text = required(metadata, key, path);
  Int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  LOOM_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty(), IoError,
             "[checkpoint] {}: __metadata__ '{}' is '{}', not a base-{} integer", path, key, text,
             base);
  return value;
}

// Trainers count epochs in an int; a checkpoint past that is corrupt or forged.
constexpr int64_t kMaxEpoch = std::numeric_limits<int32_t>::max();

int64_t metadata_in_range(const std::map<std::string, std::string>& metadata,
                          std::string_view key, std::string_view path, int64_t max) {
  const std::string& text = required(metadata, key, path);
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  LOOM_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty() &&
                 value >= 0 && value <= max,
             IoError,
             "[checkpoint] {}: __metadata__ '{}' is '{}'; expected an integer from 0 to {} (the "
             "checkpoint is corrupt or was not written by Loom; use another checkpoint)",
             path, key, text, max);
  return value;
}

void check_crc(const std::map<std::string, std::string>& metadata, std::string_view key,
               uint32_t computed, std::string_view part, std::string_view path) {
  auto stored = metadata_int<uint32_t>(metadata, key, path, 16);
  LOOM_CHECK(stored == computed, IoError,
             "[checkpoint] {}: {} checksum mismatch: stored crc32 {}, computed {} (the file is "
             "corrupt; use an older checkpoint)",
             path, part, crc_text(stored), crc_text(computed));
}

// Splits "model.x" / "optimizer.y" / "scheduler.z" back into the three state
// dicts; in a format 1 file, "optimizer.schedule.z" is the scheduler's "z".
void split_prefixed(StateDict tensors, TrainingCheckpoint& checkpoint, bool version1,
                    std::string_view path) {
  for (auto& [name, t] : tensors) {
    if (name.starts_with(kModelPrefix)) {
      checkpoint.model.emplace_back(name.substr(kModelPrefix.size()), std::move(t));
    } else if (version1 && name.starts_with(std::string(kOptimizerPrefix) +
                                            std::string(kVersion1SchedulePrefix))) {
      checkpoint.scheduler.emplace_back(
          name.substr(kOptimizerPrefix.size() + kVersion1SchedulePrefix.size()), std::move(t));
    } else if (name.starts_with(kOptimizerPrefix)) {
      checkpoint.optimizer.emplace_back(name.substr(kOptimizerPrefix.size()), std::move(t));
    } else if (!version1 && name.starts_with(kSchedulerPrefix)) {
      checkpoint.scheduler.emplace_back(name.substr(kSchedulerPrefix.size()), std::move(t));
    } else {
      LOOM_CHECK(false, IoError,
                 "[checkpoint] {}: tensor '{}' is none of 'model.*', 'optimizer.*' and "
                 "'scheduler.*'",
                 path, name);
    }
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainingCheckpoint& checkpoint) {
  check_metadata(checkpoint.extra, "save_checkpoint");
  std::vector<OutTensor> tensors =
      prepare(prefixed(checkpoint), "save_checkpoint");
  std::map<std::string, std::string> metadata = checkpoint_metadata(checkpoint);
  uint32_t data_crc = 0;
  for (const OutTensor& t : tensors) {
    data_crc = crc32_of(data_crc, t.data.raw_data(), t.entry.end - t.entry.begin);
  }
  metadata[std::string(kHeaderCrcKey)] = crc_text(header_crc(entries_of(tensors), metadata));
  metadata[std::string(kDataCrcKey)] = crc_text(data_crc);
  write_file(path, tensors, metadata);
}

TrainingCheckpoint load_checkpoint(const std::string& path, Device device) {
  InputFile file(path, "checkpoint");
  Header header = read_header(file);
  const std::string& version = required(header.metadata, kFormatKey, path);
  check_crc(header.metadata, kHeaderCrcKey, header_crc(header.entries, header.metadata), "header",
            path);
  LOOM_CHECK(version == kFormatVersion || version == kFormatVersion1, IoError,
             "[checkpoint] {}: checkpoint format version '{}' is not one this Loom reads ({} or "
             "{})",
             path, version, kFormatVersion1, kFormatVersion);
  uint32_t data_crc = 0;
  StateDict tensors = read_tensors(file, header, &data_crc);
  check_crc(header.metadata, kDataCrcKey, data_crc, "data section", path);

  TrainingCheckpoint checkpoint;
  split_prefixed(to_device(std::move(tensors), device), checkpoint, version == kFormatVersion1,
                 path);
  checkpoint.epoch = metadata_in_range(header.metadata, kEpochKey, path, kMaxEpoch);
  checkpoint.step = metadata_in_range(header.metadata, kStepKey, path,
                                      std::numeric_limits<int64_t>::max());
  checkpoint.rng_seed = metadata_int<uint64_t>(header.metadata, kSeedKey, path);
  checkpoint.rng_offset = metadata_int<uint64_t>(header.metadata, kOffsetKey, path);
  for (const auto& [key, value] : header.metadata) {
    if (key.starts_with(kExtraPrefix)) checkpoint.extra[key.substr(kExtraPrefix.size())] = value;
  }
  return checkpoint;
}

}  // namespace loom
