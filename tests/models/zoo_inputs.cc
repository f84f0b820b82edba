// File: tests/models/zoo_inputs.cc
#include "tests/models/zoo_inputs.h"

namespace loom::testing {

Shape small_input(const models::ZooModel& row, int64_t batch) {
  if (row.dataset == "imagenet") return {batch, row.input[0], 32, 32};
  if (row.per_pixel) return {batch, row.input[0], 16, 16};
  return row.batch_shape(batch);
}

}  // namespace loom::testing
