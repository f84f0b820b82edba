// File: training/flags.h
// Command-line flags shared by the example trainers, and their main().
//
// Every value is parsed as a whole token with a range check: "--epochs 1x",
// "--seed -1", "--limit -1", "--lr inf", "--metrics out.txt", "--save ''" and
// "--save m.csv --metrics m.csv" are usage errors, not silently something else.
#pragma once

#include <string>
#include <vector>

#include "training/trainer.h"

namespace loom::training {

struct ParsedFlags {
  TrainConfig config;
  bool help = false;     // --help: print the usage and exit 0
  bool explain = false;  // --explain: print the cuDNN plan cache after training
  bool fusion_report = false;  // --fusion-report: print fusion::report (measured) after training
};

// Parses `args` (argv without the program name) over `defaults`; "--flag=value"
// is "--flag value" and "-h" is "--help". Then checks what needs no data: the
// names of models, optimizers, schedules and precisions, the model against the
// dataset, --device cuda against the GPUs, bf16 against the device and, for
// CIFAR-10, that there is --data or --synthetic. Throws ValueError naming the
// flag, the value and what is accepted.
ParsedFlags parse_flags(const std::vector<std::string>& args, TrainConfig defaults);

// The zoo's models (models/registry.h) that train on `dataset` ("mnist" or
// "cifar10"), comma-separated: what --model accepts.
std::string models_for(const std::string& dataset);

// Makes the relative paths of --data, --save, --resume, --metrics, --plot and --export-onnx
// relative to `working_directory` (null or "": unchanged). train_main passes
// BUILD_WORKING_DIRECTORY, the user's directory under `bazel run`.
void resolve_user_paths(TrainConfig& config, const char* working_directory);

// Throws ValueError when two of --save, --metrics, --plot and --export-onnx name
// one file (after resolve_user_paths; "m.csv", "./m.csv" and a symbolic link to
// it are one file), or one of the last three names the --resume checkpoint: one output
// would overwrite another. (--save may name it: that is how a run goes on.)
void check_paths(const TrainConfig& config);

// Parses argv (--help prints `usage` and returns 0; a usage error prints one
// line and returns 2), trains, and returns main's exit code: 0; 1 after
// printing a loom::Error (out of memory included) or any other exception;
// --explain prints the cuDNN plan cache afterwards, --fusion-report the fused
// blocks (core/ops/fusion_report.h). Nothing escapes it.
int train_main(int argc, char** argv, TrainConfig defaults, const char* usage);

}  // namespace loom::training
