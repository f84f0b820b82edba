// File: tests/core/cuda/runtime_gpu_test.cc
// CUDA tensors: device memory, host<->device copies, layout and dtype
// conversion kernels, autograd accumulation on the device, and errors.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

using namespace loom;

namespace {

constexpr DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                DType::Int32,   DType::Int64,   DType::UInt8,   DType::Bool};

// Values in [0, 100) with fractions, so every cast rounds or truncates something.
Tensor cast_inputs(Generator& gen) {
  std::vector<double> values = rand({4, 6}, {.dtype = DType::Float64}, &gen).to_vector<double>();
  for (double& v : values) v *= 100.0;
  values[0] = 0.0;  // a false for the bool cast
  return tensor(values, {4, 6}, {.dtype = DType::Float64});
}

}  // namespace

LOOM_GPU_TEST_CASE("a tensor survives the round trip to the GPU") {
  Generator gen(1);
  Tensor x = randn({3, 5, 7}, {}, &gen);
  Tensor gpu = x.to(testing::test_gpu());
  CHECK(gpu.device() == testing::test_gpu());
  CHECK_CLOSE(gpu.cpu(), x, 0, 0);
}

LOOM_GPU_TEST_CASE("dtype conversions on the GPU match the CPU's, for every pair") {
  Generator gen(2);
  Tensor x = cast_inputs(gen);
  for (DType from : kAllDtypes) {
    Tensor source = x.to(from);
    for (DType to : kAllDtypes) {
      CAPTURE(dtype_name(from));
      CAPTURE(dtype_name(to));
      Tensor on_gpu = source.to(testing::test_gpu()).to(to);
      CHECK(on_gpu.dtype() == to);
      CHECK_CLOSE(on_gpu.cpu(), source.to(to), 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("to_all converts like to() each: values, layouts, and dense floats batched") {
  // 70 dense float32 tensors (sizes 1 to 4100, some channels-last, one with a
  // single channel), a strided
  // view that cannot walk flat, a float64 one, a bfloat16 one that needs no
  // conversion and an int64 one: every result must be to()'s, bit for bit.
  Generator gen(4);
  std::vector<Tensor> sources;
  for (int i = 0; i < 70; ++i) {
    const int64_t n = 1 + (i * 613) % 4100;
    Tensor t = randn({n}, {}, &gen);
    if (i % 7 == 3) t = randn({2, 3, 5, 2 + i % 4}, {}, &gen).contiguous(MemoryFormat::ChannelsLast);
    t = t.to(testing::test_gpu());
    // One channel with NHWC strides (25, 1, 5, 1): dense, as a first conv's weight gradient.
    if (i == 10) t = randn({6, 5, 5, 1}, {}, &gen).to(testing::test_gpu()).permute({0, 3, 1, 2});
    sources.push_back(t);
  }
  sources.push_back(randn({6, 8}, {}, &gen).to(testing::test_gpu()).slice(1, 1, 7, 2));
  sources.push_back(randn({33}, {.dtype = DType::Float64}, &gen).to(testing::test_gpu()));
  sources.push_back(randn({5}, {}, &gen).to(testing::test_gpu()).to(DType::BFloat16));
  sources.push_back(randint(-50, 50, {9}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu()));
#ifdef LOOM_WITH_CUDA
  const int64_t launches_before = cuda::convert_span_launches();
#endif
  REQUIRE(sources[10].strides() == Shape{25, 1, 5, 1});
  const std::vector<Tensor> converted = to_all(sources, DType::BFloat16);
#ifdef LOOM_WITH_CUDA
  // 70 float32 spans: two launches of at most 64; float64: a third.
  CHECK(cuda::convert_span_launches() - launches_before == 3);
#endif
  REQUIRE(converted.size() == sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    CAPTURE(i);
    CHECK(converted[i].dtype() == DType::BFloat16);
    CHECK(converted[i].strides() == sources[i].to(DType::BFloat16).strides());
    CHECK(testing::values(converted[i]) == testing::values(sources[i].to(DType::BFloat16)));
  }
  CHECK_FALSE(converted[72].is_same(sources[72]));  // detached: a new handle ...
  CHECK(converted[72].storage() == sources[72].storage());  // ... on the same memory
}

LOOM_GPU_TEST_CASE("copy_all copies like copy_ each, dense same-dtype pairs in one launch") {
  // Dense pairs of float32, int64, an odd-sized bfloat16 (so the batch moves
  // bytes, not words) and a channels-last float32; then pairs copy_all leaves to
  // copy_: a strided view, a dtype change, a host source.
  Generator gen(5);
  std::vector<Tensor> sources = {
      randn({128, 1, 28, 28}, {}, &gen).to(testing::test_gpu()),
      randint(0, 10, {128}, {.dtype = DType::Int64}, &gen).to(testing::test_gpu()),
      randn({7}, {}, &gen).to(testing::test_gpu()).to(DType::BFloat16),
      randn({2, 3, 4, 5}, {}, &gen).to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast),
      randn({6, 8}, {}, &gen).to(testing::test_gpu()).slice(1, 1, 7, 2),
      randn({9}, {}, &gen).to(testing::test_gpu()),
      randn({4}, {}, &gen),
  };
  std::vector<Tensor> targets;
  for (const Tensor& s : sources) {
    targets.push_back(full(s.sizes(), -1, {.dtype = s.dtype(), .device = testing::test_gpu()}));
  }
  targets[3] = targets[3].contiguous(MemoryFormat::ChannelsLast);
  targets[5] = full({9}, -1, {.dtype = DType::Float64, .device = testing::test_gpu()});
#ifdef LOOM_WITH_CUDA
  const int64_t launches_before = cuda::copy_span_launches();
#endif
  copy_all(targets, sources);
#ifdef LOOM_WITH_CUDA
  CHECK(cuda::copy_span_launches() - launches_before == 1);
#endif
  for (size_t i = 0; i < sources.size(); ++i) {
    CAPTURE(i);
    CHECK(testing::values(targets[i]) == testing::values(sources[i].to(targets[i].dtype())));
  }
  CHECK_THROWS_WITH_FRAGMENT(copy_all({targets[0]}, {}), ValueError, "one source per destination");
}

LOOM_GPU_TEST_CASE("layout changes on the GPU keep values and give channels-last strides") {
  Generator gen(3);
  Tensor x = randn({2, 3, 4, 5}, {}, &gen);
  Tensor nhwc = x.to(testing::test_gpu()).contiguous(MemoryFormat::ChannelsLast);
  CHECK(nhwc.strides() == Shape{60, 1, 15, 3});
  CHECK_CLOSE(nhwc.cpu(), x, 0, 0);
  Tensor back = nhwc.contiguous();
  CHECK(back.is_contiguous());
  CHECK_CLOSE(back.cpu(), x, 0, 0);
  Tensor sliced = x.to(testing::test_gpu()).slice(3, 1, 5, 2).transpose(1, 2);
  CHECK_CLOSE(sliced.cpu(), x.slice(3, 1, 5, 2).transpose(1, 2), 0, 0);
}

LOOM_GPU_TEST_CASE("fills, element access and copy_ across devices") {
  Tensor z = zeros({3, 4}, {.device = testing::test_gpu()});
  CHECK(testing::values(z) == std::vector<double>(12, 0.0));
  z.fill_(2.5);
  z.set({1, 2}, -7.0);
  CHECK(z.at({1, 2}) == -7.0);
  CHECK(z.at({0, 0}) == 2.5);
  Tensor host = tensor({1, 2, 3, 4}, {4});
  z.copy_(host);  // broadcast over rows, host -> device
  CHECK(testing::values(z.select(0, 2)) == std::vector<double>{1, 2, 3, 4});
  Tensor back = zeros({3, 4}, {.dtype = DType::Float64});
  back.copy_(z);  // device -> host with a cast
  CHECK_CLOSE(back, z.cpu().to(DType::Float64), 0, 0);
}

LOOM_GPU_TEST_CASE("gradients accumulate on the GPU") {
  Generator gen(4);
  Tensor x = randn({2, 3}, {.device = testing::test_gpu(), .requires_grad = true}, &gen);
  Tensor g = randn({3, 2}, {.device = testing::test_gpu()}, &gen);
  x.t().backward(g, /*retain_graph=*/false);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == testing::test_gpu());
  CHECK_CLOSE(x.grad().cpu(), g.cpu().t(), 0, 0);
  x.t().backward(g);
  CHECK_CLOSE(x.grad().cpu(), mul(g.cpu().t(), 2.0), 0, 0);
}

LOOM_GPU_TEST_CASE("out of memory is a typed error and the process goes on") {
  // 2^40 floats = 4 TiB: more than any GPU has.
  CHECK_THROWS_WITH_FRAGMENT(empty({1ll << 40}, {.device = testing::test_gpu()}), OutOfMemoryError,
                             "free");
  Tensor after = ones({1024}, {.device = testing::test_gpu()});
  CHECK(after.at({1023}) == 1.0);
}

LOOM_GPU_TEST_CASE("a device that does not exist is a DeviceError") {
  CHECK_THROWS_WITH_FRAGMENT(empty({4}, {.device = Device::cuda(cuda_device_count())}),
                             DeviceError, "does not exist");
}

LOOM_GPU_TEST_CASE("ops without a CUDA kernel say so") {
  Tensor x = ones({4}, {.device = testing::test_gpu()});
  CHECK_THROWS_WITH_FRAGMENT(pow(x, x), DeviceError, "[pow] has no CUDA kernel");
}

LOOM_GPU_TEST_CASE("large copies cross the pinned staging chunks intact in both directions") {
  Generator gen(5);
  // 10,000,019 float32 = 40 MB: several 4 MiB staging chunks and a ragged tail.
  Tensor x = rand({10000019}, {}, &gen);
  Tensor back = x.to(testing::test_gpu()).cpu();
  CHECK_CLOSE(back, x, 0, 0);
  Tensor gpu = zeros({10000019}, {.device = testing::test_gpu()});
  gpu.copy_(x);
  CHECK(gpu.at({10000018}) == x.at({10000018}));
  CHECK(gpu.at({4194304}) == x.at({4194304}));  // the first float of the second chunk
}
