// File: tests/core/autocast_test.cc
// The CPU side of mixed precision: AutocastGuard's thread-local nesting, the
// CPU ops ignoring autocast, the CPU ops rejecting bfloat16 / float16 tensors
// with a message that says how to convert, and the bf16 + fp32 promotion rule.
// (The GPU side is tests/core/ops/bf16_gpu_test.cc.)
//
// N batch, C channels, H, W, K out channels.
#include "core/autocast.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

namespace loom {
namespace {

constexpr const char* kGpuOnly = "bfloat16 and float16 are GPU-only in Loom";

TEST_CASE("AutocastGuard: off by default, nests, restores in reverse order") {
  CHECK_FALSE(autocast_dtype().has_value());
  {
    AutocastGuard outer(DType::BFloat16);
    REQUIRE(autocast_dtype().has_value());
    CHECK(*autocast_dtype() == DType::BFloat16);
    {
      AutocastGuard inner(DType::Float16);
      CHECK(*autocast_dtype() == DType::Float16);
      {
        AutocastGuard off(std::nullopt);
        CHECK_FALSE(autocast_dtype().has_value());
      }
      CHECK(*autocast_dtype() == DType::Float16);
    }
    CHECK(*autocast_dtype() == DType::BFloat16);
  }
  CHECK_FALSE(autocast_dtype().has_value());
}

TEST_CASE("AutocastGuard: per thread") {
  AutocastGuard guard(DType::BFloat16);
  bool other_thread_sees_autocast = true;
  std::thread other([&] { other_thread_sees_autocast = autocast_dtype().has_value(); });
  other.join();
  CHECK_FALSE(other_thread_sees_autocast);
  CHECK(*autocast_dtype() == DType::BFloat16);
}

TEST_CASE("AutocastGuard: only 16-bit float dtypes, and a failed guard changes nothing") {
  CHECK_THROWS_WITH_FRAGMENT(AutocastGuard(DType::Float32), ValueError,
                             "[autocast] computes in bfloat16 or float16, got float32");
  CHECK_THROWS_WITH_FRAGMENT(AutocastGuard(DType::Int64), ValueError, "got int64");
  CHECK_FALSE(autocast_dtype().has_value());
}

TEST_CASE("autocast: CPU tensors are never cast; the CPU ops compute as without it") {
  Generator gen(3);
  // x (N, C, H, W) = (2, 3, 5, 5), w (K, C, 3, 3) = (4, 3, 3, 3)
  Tensor x = randn({2, 3, 5, 5}, {}, &gen), w = randn({4, 3, 3, 3}, {}, &gen);
  Tensor b = randn({4}, {}, &gen), m = randn({5, 3}, {}, &gen), lw = randn({2, 3}, {}, &gen);
  Tensor conv_ref = conv2d(x, w, b), linear_ref = linear(m, lw), matmul_ref = matmul(m, lw.t());
  AutocastGuard guard(DType::BFloat16);
  CHECK(autocast_operand(x).is_same(x));
  CHECK_FALSE(autocast_operand(Tensor()).defined());
  Tensor conv = conv2d(x, w, b), lin = linear(m, lw), mm = matmul(m, lw.t());
  CHECK(conv.dtype() == DType::Float32);
  CHECK(lin.dtype() == DType::Float32);
  CHECK(mm.dtype() == DType::Float32);
  CHECK_CLOSE(conv, conv_ref, 0.0, 0.0);
  CHECK_CLOSE(lin, linear_ref, 0.0, 0.0);
  CHECK_CLOSE(mm, matmul_ref, 0.0, 0.0);
}

// Every op family the GPU runs in bf16 throws on a CPU bf16 / fp16 tensor.
TEST_CASE("CPU ops reject bfloat16 and float16 with a hint to convert") {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(half));
    const TensorOptions h = {.dtype = half};
    Tensor img = zeros({2, 8, 4, 4}, h), mat = zeros({3, 4}, h), vec = ones({8});
    const std::string has = "input has dtype " + std::string(dtype_name(half)) + " on the CPU";
    CHECK_THROWS_WITH_FRAGMENT(relu(img), TypeError, "[relu] " + has);
    CHECK_THROWS_WITH_FRAGMENT(exp(img), TypeError, kGpuOnly);
    CHECK_THROWS_WITH_FRAGMENT(add(img, 1.0), TypeError, "[add] " + has);
    CHECK_THROWS_WITH_FRAGMENT(sum(img, {0, 2, 3}), TypeError, "[sum] " + has);
    CHECK_THROWS_WITH_FRAGMENT(max_pool2d(img, {.kernel_size = {2, 2}}), TypeError,
                               "[max_pool2d] " + has);
    CHECK_THROWS_WITH_FRAGMENT(global_avg_pool2d(img), TypeError, kGpuOnly);
    CHECK_THROWS_WITH_FRAGMENT(batch_norm(img, Tensor(), Tensor(), vec, vec), TypeError,
                               "[batch_norm] " + has);
    CHECK_THROWS_WITH_FRAGMENT(conv2d(img, zeros({4, 8, 3, 3}, h)), TypeError, "[conv2d] " + has);
    CHECK_THROWS_WITH_FRAGMENT(linear(mat, zeros({2, 4}, h)), TypeError, "[linear] " + has);
    CHECK_THROWS_WITH_FRAGMENT(matmul(mat, zeros({4, 2}, h)), TypeError,
                               "[matmul] first argument has dtype");
    CHECK_THROWS_WITH_FRAGMENT(softmax(mat, 1), TypeError, "[softmax] " + has);
    CHECK_THROWS_WITH_FRAGMENT(dropout(mat, 0.5, true), TypeError, kGpuOnly);
    // Promotion happens only after validation: a CPU bf16 operand still throws.
    CHECK_THROWS_WITH_FRAGMENT(mul(mat, zeros({3, 4})), TypeError, "[mul] " + has);
    CHECK_THROWS_WITH_FRAGMENT(relu(img), TypeError, ".to(DType::Float32)");
  }
}

TEST_CASE("promote_operands: a 16-bit operand meets a wider one in the wider dtype") {
  Tensor f32 = tensor({1.5, -2.0}, {2}), f64 = tensor({0.25, 3.0}, {2}, {.dtype = DType::Float64});
  Tensor bf = tensor({1.0 / 3.0, 2.0}, {2}).to(DType::BFloat16);
  Tensor fp = tensor({0.5, 4.0}, {2}).to(DType::Float16);
  auto [a, b] = promote_operands(bf, f32);
  CHECK(a.dtype() == DType::Float32);
  CHECK(b.is_same(f32));
  CHECK(a.at({0}) == 0.333984375);  // bf16's rounding of 1/3, exactly kept by the cast
  CHECK(promote_operands(f64, bf).second.dtype() == DType::Float64);
  auto [c, d] = promote_operands(bf, fp);
  CHECK(c.dtype() == DType::Float32);
  CHECK(d.dtype() == DType::Float32);
  auto [e, f] = promote_operands(f32, f64);  // float32 meets float64 in float64, as in PyTorch
  CHECK(e.dtype() == DType::Float64);
  CHECK(f.is_same(f64));
  const Tensor labels = zeros({2}, {.dtype = DType::Int64});
  CHECK(promote_operands(labels, f32).first.is_same(labels));  // integers: the op's to promote or refuse
  CHECK(is_half_precision(DType::BFloat16));
  CHECK_FALSE(is_half_precision(DType::Float32));
}

TEST_CASE("promote_operands: the cast is differentiable, so a bf16 leaf gets a bf16 grad") {
  Tensor leaf = tensor({0.5, -1.25, 3.0}, {3}).to(DType::BFloat16).requires_grad_();
  Tensor scale = tensor({2.0, 4.0, -1.0}, {3});
  auto [promoted, other] = promote_operands(leaf, scale);
  Tensor y = sum(mul(promoted, other));
  y.backward();
  REQUIRE(leaf.grad().defined());
  CHECK(leaf.grad().dtype() == DType::BFloat16);
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{2.0, 4.0, -1.0});
}

}  // namespace
}  // namespace loom
