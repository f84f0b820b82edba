// File: tests/models/zoo_inputs.h
// Inputs for the zoo's CPU tests.
// N batch, C channels, H, W.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "models/registry.h"

namespace loom::testing {

// A small (N, C, H, W) of the row's channels: 32x32 for the ImageNet models (a
// forward at 224x224 is too slow for CI on the CPU), 16x16 for segmentation,
// the row's own size otherwise.
Shape small_input(const models::ZooModel& row, int64_t batch);

}  // namespace loom::testing
