// File: training/metrics.cc
// The metrics file (CSV or JSONL, a row per epoch), the progress line and the
// start-up's milestones.
#include "training/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json.h"
#include "training/trainer.h"

namespace loom::training {

namespace {

constexpr const char* kMetricsColumns =
    "run_id,epoch,train_loss,train_accuracy,test_loss,test_accuracy,images_per_second,seconds,"
    "elapsed_seconds,flags";

// A CSV field: quoted, with its quotes doubled (RFC 4180).
std::string csv_field(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

bool metrics_format_known(const std::string& path) {
  return path.ends_with(".csv") || path.ends_with(".jsonl");
}

std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  return fmt::format("{}-{}", stamp, static_cast<long>(::getpid()));
}

Metrics::Metrics(const std::string& path, std::string run_id, std::string flags)
    : jsonl_(path.ends_with(".jsonl")), run_id_(std::move(run_id)), flags_(std::move(flags)) {
  LOOM_CHECK(path.empty() || metrics_format_known(path), ValueError,
             "[train] the metrics file '{}' must end in .csv or .jsonl (the format follows it)",
             path);
  if (path.empty()) return;
  // Reading a FIFO's header would block; rows are appended to regular files only.
  const std::filesystem::file_type type = path_type(path, "train");
  LOOM_CHECK(type == std::filesystem::file_type::regular ||
                 type == std::filesystem::file_type::not_found,
             IoError, "[train] --metrics {}: is {}, not a regular file; give a file name", path,
             file_type_name(type));
  if (!jsonl_) check_columns(path);
  errno = 0;
  out_.open(path, std::ios::app);
  const int error = errno;
  LOOM_CHECK(out_.is_open(), IoError, "[train] --metrics {}: cannot open the file for appending: {}",
             path, error != 0 ? std::generic_category().message(error) : "reason unknown");
  if (!jsonl_ && out_.tellp() == 0) out_ << kMetricsColumns << "\n";
}

void Metrics::write(const EpochResult& r) {
  if (!out_.is_open()) return;
  if (jsonl_) {
    out_ << fmt::format(
        "{{\"run_id\": {}, \"epoch\": {}, \"train_loss\": {}, \"train_accuracy\": {}, "
        "\"test_loss\": {}, \"test_accuracy\": {}, \"images_per_second\": {}, \"seconds\": {}, "
        "\"elapsed_seconds\": {}, \"flags\": {}}}\n",
        json_string(run_id_), r.epoch, json_number(r.train_loss), json_number(r.train_accuracy),
        json_number(r.test_loss), json_number(r.test_accuracy), json_number(r.images_per_second), json_number(r.seconds),
        json_number(r.elapsed_seconds), json_string(flags_));
  } else {
    out_ << fmt::format("{},{},{},{},{},{},{},{},{},{}\n", run_id_, r.epoch, r.train_loss,
                        r.train_accuracy, r.test_loss, r.test_accuracy, r.images_per_second, r.seconds,
                        r.elapsed_seconds, csv_field(flags_));
  }
  out_.flush();
}

// Appending rows of other columns under an existing header would make a
// file no reader parses.
void Metrics::check_columns(const std::string& path) {
  std::ifstream in(path);
  std::string header;
  if (!in || !std::getline(in, header) || header.empty()) return;
  LOOM_CHECK(header == kMetricsColumns, IoError,
             "[train] --metrics {}: the file has other columns ('{}'), perhaps from an older "
             "Loom; runs append to a metrics file, so pass a new file name",
             path, header);
}

}  // namespace loom::training
