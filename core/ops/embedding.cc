// File: core/ops/embedding.cc
// embedding = index_select of the table's rows at the flattened indices; its
// backward is index_select's scatter-add.
#include "core/ops/embedding.h"

#include "core/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"

namespace loom {

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_float_tensor(weight, "embedding", "weight");
  LOOM_CHECK(weight.dim() == 2, ShapeError,
             "[embedding] weight must be a 2-D table (V, D), got shape {}",
             shape_str(weight.sizes()));
  LOOM_CHECK(indices.defined(), ValueError, "[embedding] indices is an undefined tensor");
  Shape out_sizes = indices.sizes();
  out_sizes.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).view(out_sizes);
}

}  // namespace loom
