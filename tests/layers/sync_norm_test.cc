// File: tests/layers/sync_norm_test.cc
// replica_batch_norm in one process: with one replica it is batch_norm (values,
// gradients, running statistics), its float64 gradients pass gradcheck, and a
// BatchNorm2d given a ReplicaReduce takes that path in training only. Several
// replicas are checked by the MPI suite (tests/distributed/ddp_test.cc).
#include "layers/sync_norm.h"

#include <doctest/doctest.h>

#include <memory>
#include <utility>

#include "core/gradcheck.h"
#include "core/ops/ops.h"
#include "layers/norm.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// The only replica: sums and gathers are the identity; counts its calls.
class OneReplica final : public nn::ReplicaReduce {
 public:
  void all_reduce_sum(const Tensor&) override { ++reduces; }
  Tensor all_gather(const Tensor& local) override {
    ++gathers;
    return local.clone();
  }
  int reduces = 0, gathers = 0;
};

// One replica of two whose peer's gathered statistics are given (recorded from
// the peer's own run); its sums over replicas are its own (the peer's are zero
// in the cases below: the peer's shard is empty, or its gradient is not checked).
class BesidePeer final : public nn::ReplicaReduce {
 public:
  explicit BesidePeer(Tensor peer) : peer_(std::move(peer)) {}
  void all_reduce_sum(const Tensor&) override {}
  Tensor all_gather(const Tensor& local) override {
    gathered = local.clone();
    return peer_.defined() ? cat({local, peer_}, 0) : local.clone();
  }
  Tensor gathered;  // this replica's own (3, C) statistics, for its peer

 private:
  Tensor peer_;
};

}  // namespace

TEST_CASE("replica_batch_norm: a replica with an empty shard adds nothing and takes its peer's statistics") {
  Generator gen(6);
  const TensorOptions f64{.dtype = DType::Float64};
  const Tensor x = randn({5, 3, 4, 2}, f64, &gen) * 2.0 + 1.0;
  const Tensor w = randn({3}, f64, &gen), b = randn({3}, f64, &gen);
  Tensor mean_ref = zeros({3}, f64), var_ref = ones({3}, f64);
  const Tensor expected = batch_norm(x, mean_ref, var_ref, w, b, {.training = true, .momentum = 0.3});
  // Alone, the empty shard: an empty output, the running statistics as they
  // were (not NaN), zero gradients.
  Tensor empty = zeros({0, 3, 4, 2}, f64).requires_grad_();
  Tensor wg = w.detach().requires_grad_(), bg = b.detach().requires_grad_();
  Tensor mean = zeros({3}, f64), var = ones({3}, f64);
  auto alone = std::make_shared<BesidePeer>(Tensor());
  Tensor y = nn::replica_batch_norm(
      empty, {.running_mean = mean, .running_var = var, .weight = wg, .bias = bg, .momentum = 0.3}, alone);
  CHECK(y.sizes() == empty.sizes());
  CHECK_CLOSE(mean, zeros({3}, f64), 0, 0);
  CHECK_CLOSE(var, ones({3}, f64), 0, 0);
  sum(y).backward();
  CHECK_CLOSE(wg.grad(), zeros({3}, f64), 0, 0);
  CHECK_CLOSE(bg.grad(), zeros({3}, f64), 0, 0);
  // Beside the empty shard, the replica holding the batch is batch_norm of it.
  auto holder = std::make_shared<BesidePeer>(alone->gathered);
  Tensor mean_h = zeros({3}, f64), var_h = ones({3}, f64);
  const Tensor y_h = nn::replica_batch_norm(
      x, {.running_mean = mean_h, .running_var = var_h, .weight = w, .bias = b, .momentum = 0.3}, holder);
  CHECK_CLOSE(y_h, expected, 1e-10, 1e-10);
  CHECK_CLOSE(mean_h, mean_ref, 1e-12, 1e-12);
  CHECK_CLOSE(var_h, var_ref, 1e-12, 1e-12);
  // And the empty shard beside it blends the batch's statistics in, as its peer does.
  auto beside = std::make_shared<BesidePeer>(holder->gathered);
  Tensor mean_e = zeros({3}, f64), var_e = ones({3}, f64);
  CHECK(nn::replica_batch_norm(empty.detach(), {.running_mean = mean_e, .running_var = var_e, .momentum = 0.3},
                               beside)
            .sizes() == empty.sizes());
  CHECK_CLOSE(mean_e, mean_ref, 1e-12, 1e-12);
  CHECK_CLOSE(var_e, var_ref, 1e-12, 1e-12);
}

TEST_CASE("replica_batch_norm with one replica is batch_norm, values and gradients") {
  Generator gen(3);
  for (Shape sizes : {Shape{6, 4, 5, 3}, Shape{7, 3}, Shape{5, 2, 9}}) {
    CAPTURE(shape_str(sizes));
    const int64_t c = sizes[1];
    Tensor x = (randn(sizes, {.dtype = DType::Float64}, &gen) * 2.0 + 3.0).requires_grad_();
    Tensor w = randn({c}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
    Tensor b = randn({c}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
    Tensor mean = zeros({c}, {.dtype = DType::Float64}), var = ones({c}, {.dtype = DType::Float64});
    Tensor mean_ref = mean.clone(), var_ref = var.clone();
    auto reduce = std::make_shared<OneReplica>();
    Tensor y = nn::replica_batch_norm(
        x, {.running_mean = mean, .running_var = var, .weight = w, .bias = b, .momentum = 0.3},
        reduce);
    Tensor expected = batch_norm(x, mean_ref, var_ref, w, b, {.training = true, .momentum = 0.3});
    CHECK_CLOSE(y, expected, 1e-10, 1e-10);
    CHECK_CLOSE(mean, mean_ref, 1e-12, 1e-12);
    CHECK_CLOSE(var, var_ref, 1e-12, 1e-12);
    Tensor dy = randn(sizes, {.dtype = DType::Float64}, &gen);
    sum(y * dy).backward();
    const std::vector<Tensor> got = {x.grad().clone(), w.grad().clone(), b.grad().clone()};
    for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    sum(expected * dy).backward();
    const std::vector<Tensor> want = {x.grad(), w.grad(), b.grad()};
    for (size_t i = 0; i < got.size(); ++i) CHECK_CLOSE(got[i], want[i], 1e-9, 1e-9);
    CHECK(reduce->gathers == 1);
    CHECK(reduce->reduces == 1);
  }
}

TEST_CASE("replica_batch_norm: float64 gradcheck of x, weight and bias") {
  Generator gen(4);
  Tensor x = randn({4, 3, 2, 2}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  Tensor w = randn({3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  Tensor b = randn({3}, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  auto reduce = std::make_shared<OneReplica>();
  GradcheckResult result = gradcheck(
      [&](const std::vector<Tensor>& in) {
        return nn::replica_batch_norm(in[0], {.weight = in[1], .bias = in[2]}, reduce);
      },
      {x, w, b});
  CHECK_MESSAGE(result.ok, result.message);
}

TEST_CASE("a BatchNorm2d with a ReplicaReduce syncs in training and uses running stats in eval") {
  Generator gen(5);
  nn::BatchNorm2d bn(3);
  auto reduce = std::make_shared<OneReplica>();
  bn.set_replica_reduce(reduce);
  Tensor x = randn({4, 3, 5, 5}, {}, &gen);
  (void)bn(x);
  CHECK(reduce->gathers == 1);
  CHECK(bn.num_batches_tracked().item() == 1);
  bn.eval();
  Tensor y = bn(x);
  CHECK(reduce->gathers == 1);  // evaluation needs no other replica
  CHECK_CLOSE(y, batch_norm(x, bn.running_mean(), bn.running_var(), bn.weight(), bn.bias(), {.training = false}),
              1e-6, 1e-6);
}
