// File: tests/distributed/process_group_test.cc
// Collectives over MPI between the ranks of `mpirun.sh N` (N >= 2).
#include "distributed/process_group.h"

#include <doctest/doctest.h>

#include "core/ops/ops.h"
#include "tests/distributed/world.h"
#include "tests/testing.h"

using namespace loom;
using loom::testing::world;

namespace {

// Rank r's tensor: (r + 1) * [0, 1, 2, ...] in `sizes`.
Tensor rank_tensor(const Shape& sizes, DType dtype = DType::Float32) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return mul(arange(n, {.dtype = dtype}), static_cast<double>(world()->rank() + 1)).view(sizes);
}

// 1 + 2 + ... + N.
double rank_sum() { return world()->size() * (world()->size() + 1) / 2.0; }

}  // namespace

TEST_CASE("all_reduce sums or averages every rank's tensor, in place") {
  const int n = world()->size();
  Tensor x = rank_tensor({2, 3});
  world()->all_reduce(x);
  CHECK_CLOSE(x, mul(arange(6).view({2, 3}), rank_sum()), 0, 0);

  Tensor y = rank_tensor({5}, DType::Float64);
  world()->all_reduce(y, distributed::ReduceOp::Avg);
  CHECK_CLOSE(y, mul(arange(5, {.dtype = DType::Float64}), rank_sum() / n), 1e-15, 0);

  Tensor counts = full({3}, world()->rank(), {.dtype = DType::Int64});
  world()->all_reduce(counts);
  CHECK(counts.to_vector<int64_t>() == std::vector<int64_t>(3, n * (n - 1) / 2));
}

TEST_CASE("all_reduce writes back into a non-contiguous view") {
  Tensor base = rank_tensor({3, 4});
  Tensor view = base.t();  // (4, 3), strides (1, 4)
  world()->all_reduce(view);
  CHECK_CLOSE(base, mul(arange(12).view({3, 4}), rank_sum()), 0, 0);
}

TEST_CASE("broadcast gives every rank the root's values") {
  const int root = world()->size() - 1;
  Tensor x = full({4}, world()->rank());
  world()->broadcast(x, root);
  CHECK_CLOSE(x, full({4}, root), 0, 0);
}

TEST_CASE("all_gather stacks the ranks' tensors along dim 0; reduce_scatter splits the sum") {
  const int n = world()->size();
  Tensor mine = full({2, 3}, world()->rank());
  Tensor all = empty({2 * n, 3});
  world()->all_gather(all, mine);
  for (int r = 0; r < n; ++r) CHECK_CLOSE(all.narrow(0, 2 * r, 2), full({2, 3}, r), 0, 0);

  // Every rank contributes rank_tensor (N*2,): rank r keeps the sum of rows [2r, 2r + 2).
  Tensor input = rank_tensor({2 * n});
  Tensor out = empty({2});
  world()->reduce_scatter(out, input, distributed::ReduceOp::Sum);
  const double r = world()->rank();
  CHECK_CLOSE(out, tensor({2 * r * rank_sum(), (2 * r + 1) * rank_sum()}, {2}), 1e-6, 0);
  world()->reduce_scatter(out, input, distributed::ReduceOp::Avg);
  CHECK_CLOSE(out, tensor({2 * r * rank_sum() / n, (2 * r + 1) * rank_sum() / n}, {2}), 1e-6, 0);
  world()->barrier();
}

TEST_CASE("ranks that disagree on the shape or dtype get a clear error, not garbage" *
          doctest::skip(loom::testing::single_rank())) {
  // Rank 0 passes (2, 3) and the others (3, 2): every rank throws, naming both shapes.
  Tensor x = world()->rank() == 0 ? zeros({2, 3}) : zeros({3, 2});
  CHECK_THROWS_WITH_FRAGMENT(world()->all_reduce(x), ShapeError, "the ranks' shapes differ");
  Tensor y = zeros({4}, {.dtype = world()->rank() == 0 ? DType::Float32 : DType::Float64});
  CHECK_THROWS_WITH_FRAGMENT(world()->broadcast(y, 0), TypeError, "the ranks' dtypes differ: rank");
  // The check ran before any data moved, so the group is still usable.
  Tensor ok = ones({2});
  world()->all_reduce(ok);
  CHECK_CLOSE(ok, full({2}, world()->size()), 0, 0);
}

TEST_CASE("arguments a rank can check alone are refused before any communication") {
  Tensor in = zeros({2, 3});
  const int64_t wrong_rows = 2 * world()->size() + 1;  // one row more than the ranks' stack, for any count
  CHECK_THROWS_WITH_FRAGMENT(world()->all_gather(zeros({wrong_rows, 3}), in), ShapeError,
                             "ranks stacked along dim 0");
  CHECK_THROWS_WITH_FRAGMENT(world()->all_reduce(zeros({2}, {.dtype = DType::BFloat16})), TypeError,
                             "MPI has no bfloat16");
  CHECK_THROWS_WITH_FRAGMENT(world()->all_reduce(zeros({2}, {.dtype = DType::Int64}), distributed::ReduceOp::Avg),
                             TypeError, "needs a floating tensor");
  CHECK_THROWS_WITH_FRAGMENT(world()->broadcast(zeros({2}), world()->size()), ValueError,
                             "is not a rank of this group");
}
