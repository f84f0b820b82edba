// File: tests/core/ops/indexing_gpu_test.cc
// The ops added for the libtorch-style API, on the GPU against the CPU
// reference, forward and backward, with inputs in NCHW and channels-last:
// comparisons (Bool masks, equal bit for bit), where, masked_fill, gather,
// index_select, embedding (the atomic scatter-add backward, with repeated
// indices) and conv_transpose2d (the conv kernels with swapped roles, under
// strict fp32 and tf32). Each check prints one "PARITY" line.
//
// N batch, C channels, H, W, K out channels.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/numerics.h"
#include "core/ops/ops.h"
#include "tests/testing.h"

using namespace loom;

namespace {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr MemoryFormat kLayouts[] = {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast};

Tensor to_gpu(const Tensor& t, MemoryFormat format) {
  Tensor g = t.detach().to(testing::test_gpu());
  if (t.dim() == 4) g = g.contiguous(format);
  return t.requires_grad() ? g.requires_grad_(true) : g;
}

// Runs `op` on CPU and GPU copies of `inputs` (4-D ones in `format` on the
// GPU), backpropagates one random gradient through both when the output
// requires grad, and checks the output and every input gradient.
void check_parity(const std::string& name, const OpFn& op, const std::vector<Tensor>& inputs,
                  MemoryFormat format, double tol, Generator& gen) {
  CAPTURE(name);
  CAPTURE(memory_format_name(format));
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    Tensor leaf = t.detach().clone();
    cpu_in.push_back(t.requires_grad() ? leaf.requires_grad_(true) : leaf);
    gpu_in.push_back(to_gpu(cpu_in.back(), format));
  }
  Tensor cpu_out = op(cpu_in), gpu_out = op(gpu_in);
  REQUIRE(gpu_out.device().is_cuda());
  CHECK(gpu_out.dtype() == cpu_out.dtype());
  const double fwd = testing::normalized_error(gpu_out.cpu(), cpu_out);
  double bwd = 0;
  if (cpu_out.requires_grad()) {
    Tensor g = randn(cpu_out.sizes(), {.dtype = cpu_out.dtype()}, &gen);
    cpu_out.backward(g);
    gpu_out.backward(g.to(testing::test_gpu()));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      // An input that reaches the output only through a comparison gets no
      // gradient on either device.
      REQUIRE(gpu_in[i].grad().defined() == cpu_in[i].grad().defined());
      if (!cpu_in[i].grad().defined()) continue;
      CHECK(gpu_in[i].grad().device().is_cuda());
      bwd = std::max(bwd, testing::normalized_error(gpu_in[i].grad().cpu(), cpu_in[i].grad()));
    }
  }
  std::printf("PARITY %-26s %-13s fwd=%.2e bwd=%.2e\n", name.c_str(),
              std::string(memory_format_name(format)).c_str(), fwd, bwd);
  CHECK(fwd <= tol);
  CHECK(bwd <= tol);
}

Tensor leaf(const Shape& sizes, Generator& gen) {
  return randn(sizes, {}, &gen).requires_grad_(true);
}

Tensor ints(int64_t high, const Shape& sizes, Generator& gen) {
  return randint(0, high, sizes, {.dtype = DType::Int64}, &gen);
}

}  // namespace

LOOM_GPU_TEST_CASE("comparisons, where and masked_fill match the CPU on the GPU") {
  Generator gen(61);
  for (MemoryFormat f : kLayouts) {
    Tensor a = leaf({2, 3, 4, 5}, gen), b = leaf({2, 3, 4, 5}, gen), row = leaf({5}, gen);
    Tensor labels = ints(3, {2, 3, 4, 5}, gen), other = ints(3, {2, 3, 4, 5}, gen);
    for (auto [name, fn] : std::vector<std::pair<std::string, OpFn>>{
             {"eq", [](auto& in) { return in[0] == in[1]; }},
             {"ne", [](auto& in) { return in[0] != in[1]; }},
             {"lt(broadcast)", [](auto& in) { return in[0] < in[2]; }},
             {"le", [](auto& in) { return in[0] <= in[1]; }},
             {"gt(scalar)", [](auto& in) { return in[0] > 0.25; }},
             {"ge(scalar)", [](auto& in) { return in[0] >= -0.5; }},
             {"eq(int64)", [](auto& in) { return in[3] == in[4]; }},
             {"sum(mask)", [](auto& in) { return (in[3] == in[4]).sum(); }},
         }) {
      check_parity(name, fn, {a, b, row, labels, other}, f, 0.0, gen);
    }
    check_parity("where", [](auto& in) { return where(in[0] > in[1], in[0], in[2]); },
                 {a, b, row}, f, 1e-6, gen);
    check_parity("masked_fill", [](auto& in) { return masked_fill(in[0], in[1] > 0, -3.0); },
                 {a, b}, f, 1e-6, gen);
  }
}

LOOM_GPU_TEST_CASE("gather, index_select and embedding match the CPU on the GPU") {
  Generator gen(62);
  for (MemoryFormat f : kLayouts) {
    Tensor x = leaf({3, 5, 4, 6}, gen);
    Tensor index = ints(5, {3, 7, 4, 6}, gen), rows = ints(6, {9}, gen);
    check_parity("gather(dim 1)", [](auto& in) { return gather(in[0], 1, in[1]); }, {x, index},
                 f, 1e-6, gen);
    check_parity("index_select(dim 3)", [](auto& in) { return index_select(in[0], 3, in[1]); },
                 {x, rows}, f, 1e-6, gen);
    // A small table read many times: every row is hit by many atomic adds.
    Tensor table = leaf({7, 33}, gen), tokens = ints(7, {16, 40}, gen);
    check_parity("embedding", [](auto& in) { return embedding(in[0], in[1]); }, {table, tokens},
                 f, 1e-5, gen);
  }
}

LOOM_GPU_TEST_CASE("gather and index_select check indices on the GPU too") {
  Tensor x = zeros({2, 3}, {.device = testing::test_gpu()});
  Tensor bad = tensor({0, 3}, {2}, {.dtype = DType::Int64, .device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(index_select(x, 1, bad), IndexError, "index 3 (element 1");
}

LOOM_GPU_TEST_CASE("conv_transpose2d matches the CPU on the GPU") {
  struct Case {
    Shape x, w;
    ConvTranspose2dOptions options;
  };
  const std::vector<Case> cases = {
      {{4, 8, 7, 7}, {8, 16, 3, 3}, {}},
      {{2, 16, 8, 8}, {16, 8, 2, 2}, {.stride = {2, 2}}},
      {{3, 5, 6, 9}, {5, 3, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}},
      {{2, 6, 5, 5}, {6, 2, 3, 3}, {.padding = {1, 1}, .dilation = {2, 2}, .groups = 3}},
  };
  Generator gen(63);
  for (Precision precision : {Precision::StrictFp32, Precision::Tf32}) {
    NumericsGuard policy({.precision = precision});
    const double tol = precision == Precision::StrictFp32 ? 1e-4 : 1e-2;
    for (MemoryFormat f : kLayouts) {
      for (const Case& c : cases) {
        Tensor x = leaf(c.x, gen), w = leaf(c.w, gen), b = leaf({c.w[1] * c.options.groups}, gen);
        const ConvTranspose2dOptions o = c.options;
        check_parity(std::string("conv_transpose2d ") + std::string(precision_name(precision)),
                     [o](auto& in) { return conv_transpose2d(in[0], in[1], in[2], o); },
                     {x, w, b}, f, tol, gen);
      }
    }
  }
}
