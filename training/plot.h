// File: training/plot.h
// --plot: tools/plot_metrics.py draws the run's loss and accuracy per epoch
// from its metrics file into a PNG at the end (through Debian's
// python3-matplotlib). Everything it needs is checked before training.
// Private to the trainer (training/loop.cc).
#pragma once

#include <string>
#include <utility>

#include "training/config.h"

namespace loom::training {

// The plot tool, found now so that a missing tool or matplotlib fails before
// the training, not after it ("" without --plot). ValueError for a name that
// is not a .png, IoError for an unwritable path, a missing tool or matplotlib.
std::string check_plot(const TrainConfig& c);

// Draws the run `run_id` of the metrics file `metrics` into c.plot with `tool`.
void draw_plot(const TrainConfig& c, const std::string& tool, const std::string& metrics, const std::string& run_id);

// Deletes a temporary file when the run ends, however it ends.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::string path) : path_(std::move(path)) {}
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

 private:
  std::string path_;
};

}  // namespace loom::training
