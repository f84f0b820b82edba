// File: examples/common/flags.h
// Command-line flags shared by the example trainers, and their main().
#pragma once

#include "examples/common/trainer.h"

namespace loom::examples {

// Parses argv over `defaults` (--help prints `usage` and exits 0; a bad flag
// prints the problem and `usage` and exits 2), trains, and returns main's exit
// code: 0, or 1 after printing a loom::Error. --explain prints the cuDNN plan
// cache afterwards.
int train_main(int argc, char** argv, TrainConfig defaults, const char* usage);

}  // namespace loom::examples
