// File: training/trainer.h
// The trainer as a library, behind both example trainers (examples/mnist,
// examples/cifar): each binary parses its flags (training/flags.h) into a
// TrainConfig (training/config.h) and calls train(); tests run short trainings
// through the same code. Inside: the data (datasets.h), the loop with its
// model from the zoo's registry (loop.cc), metrics and progress (metrics.h),
// checkpoints and resume (checkpoint.h) and the --plot picture (plot.h).
//
//   loom::training::TrainResult r = loom::training::train({.epochs = 1, .limit = 2000});
#pragma once

#include <string>

#include "training/config.h"

namespace loom::training {

// Throws loom::Error: ValueError for a bad config, IoError for bad data files,
// an unusable --save path or a --plot without its tool (both checked before
// training starts), OutOfMemoryError, and NonFiniteError for a NaN/inf loss
// unless stop_on_nonfinite_loss is off (or, under detect_anomaly, for the
// first op whose forward or backward makes one).
// A checkpoint stores the flags that decide what the run computes; resuming
// with different ones warns about each (the new values win).
TrainResult train(const TrainConfig& config);

// True for the metrics file names train() writes: *.csv or *.jsonl. Each row
// is one epoch of one run: run_id (UTC start time and process id), epoch,
// train_loss, train_accuracy, test_loss, test_accuracy, images_per_second, seconds (the
// epoch's training time), elapsed_seconds (since the run began) and flags
// (the flags that decide what the run computes, as a command line). A CSV
// file's first line names the columns; runs append to it.
bool metrics_format_known(const std::string& path);

// The plot tool (tools/plot_metrics.py in the program's runfiles), or "" when
// it is not there.
std::string plot_tool_path();

}  // namespace loom::training
