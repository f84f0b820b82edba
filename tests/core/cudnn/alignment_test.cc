// File: tests/core/cudnn/alignment_test.cc
// The byte alignment every cuDNN graph declares, without a GPU: it comes from
// each tensor's pointer, it is part of the plan key, a graph with a tensor
// under 16 bytes is not fully aligned, and binding a pointer less aligned than
// the graph declares is refused before cuDNN sees it. Pointers here are
// addresses only; nothing is read through them.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <cstdint>

#include "core/cudnn/conv.h"
#include "core/cudnn/plan_cache.h"
#include "core/cudnn/pointwise.h"
#include "core/cudnn/pool.h"
#include "core/cudnn/tensor_spec.h"
#include "core/error.h"
#include "tests/testing.h"

using namespace loom;
using namespace loom::cudnn;

namespace {

constexpr uintptr_t kBase = 0x7f0000000000;  // 512-byte aligned, as the allocator's blocks

void* address(uintptr_t offset_bytes) { return reinterpret_cast<void*>(kBase + offset_bytes); }

// A dense (N, C, H, W) view at `data` in `format`.
Strided view_at(void* data, const Shape& sizes, MemoryFormat format, DType dtype = DType::Float32) {
  return {.data = data, .dtype = dtype, .sizes = sizes, .strides = strides_for(sizes, format)};
}

const Shape kImage{128, 8, 8, 8};
const Shape kPooled{128, 8, 4, 4};

Graph relu_graph(const Strided& y, const Strided& x) {
  std::optional<Graph> g = pointwise_forward_graph({CUDNN_POINTWISE_RELU_FWD, {}}, y, x);
  REQUIRE(g.has_value());
  return *g;
}

int64_t declared(const Graph& g, int64_t uid) {
  for (const TensorSpec& t : g.tensors()) {
    if (t.uid == uid) return t.alignment;
  }
  FAIL("no tensor with uid " << uid);
  return 0;
}

}  // namespace

TEST_CASE("pointer_alignment is the largest power of two up to 16 dividing the address") {
  CHECK(pointer_alignment(address(0)) == 16);
  CHECK(pointer_alignment(address(32)) == 16);
  CHECK(pointer_alignment(address(8)) == 8);
  CHECK(pointer_alignment(address(4)) == 4);
  CHECK(pointer_alignment(address(12)) == 4);
  CHECK(pointer_alignment(address(2)) == 2);
  CHECK(pointer_alignment(address(1)) == 1);
}

TEST_CASE("every spec declares its own pointer's alignment, by element offset and dtype") {
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    const int64_t f32_expected[] = {16, 4, 8, 4, 16};
    const int64_t bf16_expected[] = {16, 2, 4, 2, 8};
    for (int64_t offset = 0; offset < 5; ++offset) {
      CAPTURE(offset);
      Strided f32 = view_at(address(4 * offset), kImage, format);
      Strided bf16 = view_at(address(2 * offset), kImage, format, DType::BFloat16);
      CHECK(spec_of(f32, 1).alignment == f32_expected[offset]);
      CHECK(spec_of(bf16, 1).alignment == bf16_expected[offset]);
      CHECK(channel_spec(8, 1, address(4 * offset)).alignment == f32_expected[offset]);
    }
  }
}

TEST_CASE("the plan key tells apart one graph at an aligned and an under-aligned pointer") {
  const NumericsPolicy policy{};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    Strided y = view_at(address(1024), kImage, format);
    Graph aligned = relu_graph(y, view_at(address(0), kImage, format));
    Graph again = relu_graph(y, view_at(address(64), kImage, format));
    Graph under = relu_graph(y, view_at(address(4), kImage, format));
    CHECK(PlanKey(aligned, policy, 0) == PlanKey(again, policy, 0));
    CHECK_FALSE(PlanKey(aligned, policy, 0) == PlanKey(under, policy, 0));
    CHECK(aligned.pattern() == under.pattern());  // only the alignment differs
  }
}

TEST_CASE("graphs with an under-aligned bound tensor are not fully aligned, for every builder") {
  const kernel::ConvParams p{1, 1, 1, 1, 1, 1, 1};
  const Shape weight{8, 8, 3, 3};
  const kernel::Pool2dParams pool{2, 2, 2, 2, 0, 0, /*max=*/false, /*count_include_pad=*/true};
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    CAPTURE(memory_format_name(format));
    for (uintptr_t offset : {uintptr_t{0}, uintptr_t{4}, uintptr_t{8}}) {
      CAPTURE(offset);
      const bool aligned = offset == 0;
      Strided x = view_at(address(offset), kImage, format), y = view_at(address(0), kImage, format);
      Strided w = view_at(address(0), weight, format), pooled = view_at(address(0), kPooled, format);
      Graph relu = relu_graph(y, x);
      CHECK(declared(relu, 1) == pointer_alignment(x.data));
      CHECK(fully_aligned(relu) == aligned);
      for (ConvDirection direction :
           {ConvDirection::Forward, ConvDirection::BackwardData, ConvDirection::BackwardFilter}) {
        CHECK(fully_aligned(conv2d_graph(direction, x, w, y, p)) == aligned);
      }
      CHECK(fully_aligned(pool2d_forward_graph(pooled, nullptr, x, pool)) == aligned);
      CHECK(fully_aligned(pool2d_backward_graph(x, pooled, {}, pool)) == aligned);
    }
  }
}

TEST_CASE("virtual and by-value tensors do not count against full alignment") {
  Graph g;
  g.add_tensor(spec_of(view_at(address(0), kImage, MemoryFormat::Contiguous), 1));
  TensorSpec intermediate = spec_of(view_at(address(4), kImage, MemoryFormat::Contiguous), 2);
  intermediate.is_virtual = true;
  g.add_tensor(intermediate);
  g.add_tensor(scalar_spec(3, 0.5));  // by value, declared 4 bytes
  CHECK(fully_aligned(g));
}

TEST_CASE("binding a pointer less aligned than the graph declares throws before cuDNN runs") {
  Strided y = view_at(address(1024), kImage, MemoryFormat::ChannelsLast);
  Graph aligned = relu_graph(y, view_at(address(0), kImage, MemoryFormat::ChannelsLast));
  const void* under = address(4);
  CHECK_THROWS_WITH_FRAGMENT(aligned.check_alignment({{1, under}, {2, y.data}}), ValueError,
                             "(4-byte aligned) but its plan was built for 16-byte alignment");
  CHECK_THROWS_WITH_FRAGMENT(aligned.check_alignment({{1, under}}), ValueError, "relu_fwd");
  // More alignment than declared is always fine.
  Graph under_graph = relu_graph(y, view_at(address(4), kImage, MemoryFormat::ChannelsLast));
  CHECK_NOTHROW(under_graph.check_alignment({{1, address(0)}, {2, y.data}}));
  CHECK_NOTHROW(under_graph.check_alignment({{1, address(4)}, {2, y.data}}));
  CHECK_THROWS_AS(under_graph.check_alignment({{1, address(2)}, {2, y.data}}), ValueError);
}
#endif  // LOOM_WITH_CUDA
