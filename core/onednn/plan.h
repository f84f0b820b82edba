// File: core/onednn/plan.h
// The oneDNN tier's plans, as the cuDNN plan cache on the GPU: a plain key (the
// kind of primitive and every integer that shapes it: dims, strides, op
// attributes, the thread count) maps to a plan built once: the primitive, and
// for each operand whose user layout (Loom's strides) differs from the one the
// primitive computes in, a reorder into or out of that layout. Keys oneDNN has
// no fast implementation for are cached too (as no plan), and the op runs on
// the reference kernels.
//
//   Key key{"eltwise_forward", {alg, n}};
//   std::shared_ptr<const Plan> plan = cached_plan(key, [&] { return make_plan(...); });
//   if (plan) execute(*plan, {{DNNL_ARG_SRC, x.data}, {DNNL_ARG_DST, y.data}});
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/onednn/tier.h"
#include "core/shape.h"
#include "core/strided.h"

namespace loom::onednn {

struct PrimitiveDescDeleter {
  void operator()(dnnl_primitive_desc_t pd) const;
};
struct PrimitiveDeleter {
  void operator()(dnnl_primitive_t p) const;
};
struct AttrDeleter {
  void operator()(dnnl_primitive_attr_t a) const;
};
using PrimitiveDesc = std::unique_ptr<dnnl_primitive_desc, PrimitiveDescDeleter>;
using Primitive = std::unique_ptr<dnnl_primitive, PrimitiveDeleter>;
using Attr = std::unique_ptr<dnnl_primitive_attr, AttrDeleter>;

// NCHW (row-major) or channels-last when t is dense in that layout, else nothing.
std::optional<MemoryFormat> dense_format(const Strided& t);

// Memory descriptors: a Strided view as it is (float32, its sizes and strides);
// a dense layout by tag; "any" (the primitive picks).
dnnl_memory_desc_t md_of(const Strided& t);
dnnl_memory_desc_t md_tag(const Shape& dims, dnnl_format_tag_t tag);
dnnl_memory_desc_t md_any(const Shape& dims);

// Attributes with a user scratchpad (the plan allocates it per run) and, when
// `post_eltwise` is not dnnl_alg_kind_undef, that eltwise applied to the
// result; with `accumulate`, the result is added to what dst holds.
Attr make_attr(dnnl_alg_kind_t post_eltwise = dnnl_alg_kind_undef, bool accumulate = false);

// True when an op descriptor's init succeeded; false where oneDNN cannot
// describe the op (invalid_arguments: a geometry it has no words for, such as a
// transposed convolution's output_padding at stride 1); throws otherwise.
bool described(dnnl_status_t init_status);

// The primitive descriptor of an op descriptor: oneDNN's first implementation
// that does not spin at a barrier (plan.cc), or null where it has none before
// its reference one ("ref:any": the reference kernels are faster). Where
// `preferred` is given and oneDNN lists an implementation whose name contains
// it before its reference one, that one instead (measured faster for the key:
// see conv.cc).
PrimitiveDesc make_primitive_desc(const void* op_desc, const Attr& attr,
                                  const_dnnl_primitive_desc_t hint = nullptr,
                                  std::string_view preferred = {});

// One execute argument as Loom holds it: in the layout `user`, or, when
// `user` is left zero (ndims 0), in the primitive's own layout (a workspace:
// Loom allocates Plan::bytes(arg) and passes it back to the backward).
struct UserOperand {
  int arg;                      // DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, ...
  bool output;                  // written by the primitive
  dnnl_memory_desc_t user{};    // the layout Loom passes
};

struct PlanOperand {
  int arg = 0;
  bool output = false;
  dnnl_memory_desc_t user{};
  dnnl_memory_desc_t inner{};  // the primitive's layout
  Primitive reorder;           // user -> inner (inputs) or inner -> user (outputs); null if equal
  size_t inner_bytes = 0;
  bool serial_reorder = false;  // the reorder runs on the calling thread alone (plan.cc: runs_serial)
};

struct Plan {
  Primitive primitive;
  std::vector<PlanOperand> operands;
  size_t scratchpad_bytes = 0;
  std::string impl;  // oneDNN's implementation name, e.g. "brgconv:avx512_core"
  bool serial = false;  // the primitive runs on the calling thread alone, else on the pool (plan.cc)

  // The bytes of argument `arg` as Loom holds it (0 if the plan has no such operand).
  size_t bytes(int arg) const;
};

// The plan of `pd` for the user operands (every argument the primitive reads
// or writes, besides the scratchpad).
std::shared_ptr<Plan> make_plan(const PrimitiveDesc& pd, const std::vector<UserOperand>& operands);

struct Key {
  std::string_view kind;  // a string literal naming the primitive
  std::vector<int64_t> ints;
  bool operator==(const Key& other) const { return kind == other.kind && ints == other.ints; }
};

// The plan cached for `key` (the thread count is added to it), built by
// `build` at the first request; null plans are cached too.
std::shared_ptr<const Plan> cached_plan(Key key, const std::function<std::shared_ptr<Plan>()>& build);

// Runs the plan on the user buffers (one per plan operand, by arg): reorders
// inputs in, runs the primitive, reorders outputs out, with the reorder buffers
// and the scratchpad in the calling thread's scratch memory. Each step runs on
// its own team: the pool, or the calling thread alone for a memory-bound step
// on a small tensor.
void execute(const Plan& plan, const std::vector<std::pair<int, void*>>& buffers);

// One line per cached plan (kind, key, implementation, reorders, whether the
// primitive runs on the calling thread alone), for explain().
std::vector<std::string> plan_lines();

// How many plans have run since the process started: the tests' proof that an
// op ran on this tier rather than falling back.
int64_t executions();

// Drops every cached plan, as a fresh process starts (the determinism tests).
void clear_plans();

}  // namespace loom::onednn
