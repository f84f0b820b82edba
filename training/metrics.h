// File: training/metrics.h
// What a run reports while it trains: the metrics file (a row per epoch,
// CSV or JSONL), the progress line on stderr and the start-up's milestones.
// Private to the trainer (training/loop.cc).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "training/config.h"

namespace loom::training {

inline constexpr int64_t kSample = 25;  // read the epoch's tally back every kSample batches

// "20261124T001530Z-4242": the run's UTC start and the process id, so that rows
// of runs appended to one file stay apart.
std::string new_run_id();

// The metrics file a run appends its epochs to (none for an empty path). The
// format follows the name (*.csv or *.jsonl); a CSV file starts with a header
// naming the columns, and one with other columns is refused (IoError).
class Metrics {
 public:
  Metrics(const std::string& path, std::string run_id, std::string flags);
  void write(const EpochResult& r);

 private:
  static void check_columns(const std::string& path);

  bool jsonl_;
  std::string run_id_, flags_;
  std::ofstream out_;
};

// Where the progress goes: a line redrawn in place with '\r' on a terminal;
// in a log file or pipe, one line per tenth of the epoch.
class Progress {
 public:
  Progress(bool on, int epochs, int64_t batches)
      : on_(on), terminal_(::isatty(::fileno(stderr)) == 1), epochs_(epochs), batches_(std::max<int64_t>(batches, 1)) {}

  // True when batch `batch` (1-based) of the epoch is one to show.
  bool due(int64_t batch) const {
    if (!on_) return false;
    if (terminal_) return batch % kSample == 0 || batch == batches_;
    return tenth(batch) > tenth(batch - 1);
  }

  void show(const EpochResult& r, int64_t batch) const {
    double eta = batch > 0 ? r.seconds * static_cast<double>(batches_ - batch) / static_cast<double>(batch) : 0;
    if (terminal_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(kWidth * batch / batches_);
      std::fprintf(stderr, "\repoch %d/%d [%-*s] %lld/%lld loss %.4f acc %.3f %.0f img/s ETA %.0fs   ",
                   r.epoch, epochs_, kWidth, std::string(filled, '=').c_str(),
                   static_cast<long long>(batch), static_cast<long long>(batches_), r.train_loss,
                   r.train_accuracy, r.images_per_second, eta);
    } else {
      std::fprintf(stderr, "epoch %d/%d %3lld%% %lld/%lld loss %.4f acc %.3f %.0f img/s ETA %.0fs\n",
                   r.epoch, epochs_, static_cast<long long>(100 * batch / batches_),
                   static_cast<long long>(batch), static_cast<long long>(batches_), r.train_loss,
                   r.train_accuracy, r.images_per_second, eta);
    }
  }

  void finish() const {
    if (on_ && terminal_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t tenth(int64_t batch) const { return 10 * batch / batches_; }

  bool on_, terminal_;
  int epochs_;
  int64_t batches_;
};

// The start-up's milestones in seconds on the trainer's clock (the "since
// start" of the epoch lines), so a run shows which phase before the first step
// is its critical path. The data thread's milestones come back with the splits.
class StartupPhases {
 public:
  using Clock = std::chrono::steady_clock;
  explicit StartupPhases(Clock::time_point began) : began_(began) {}

  double seconds() const { return std::chrono::duration<double>(Clock::now() - began_).count(); }
  void mark(const char* phase) { mark_at(phase, seconds()); }
  void mark_at(const char* phase, double at) { phases_.push_back({phase, at}); }

  // "start-up (s since start): model on device 0.15, ..., first step queued 0.43",
  // phases in the order they were marked (the data thread's come back together).
  std::string line() const {
    std::string text = "start-up (s since start):";
    for (size_t i = 0; i < phases_.size(); ++i) {
      text += fmt::format("{} {} {:.3f}", i == 0 ? "" : ",", phases_[i].name, phases_[i].at);
    }
    return text;
  }

 private:
  struct Phase {
    const char* name;
    double at;
  };
  Clock::time_point began_;
  std::vector<Phase> phases_;
};

}  // namespace loom::training
