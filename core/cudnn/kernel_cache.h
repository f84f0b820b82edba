// File: core/cudnn/kernel_cache.h
// Kernel reuse across batch sizes. A runtime-compiled engine (NVRTC, 0.2 to
// 0.65 s per plan on an H100) compiles a kernel for one graph's dims; the tail
// batch (60000 images in batches of 128 end with 96) and the evaluation batch
// would each compile their own. cuDNN's kernel cache avoids that for graphs
// built with dynamic shapes enabled: a plan finalized with the cache stores its
// kernel there, and a later graph of the same structure with other dims binds
// that kernel instead of compiling it.
//
// One KernelCache per structure: the graph's canonical form with the batch left
// out (StructureKey), the numerics policy and the device, for the graph kinds
// kernel_cache_applies() to. plan.cc builds a runtime-compiled config's kernel
// for dynamic shapes with it, through the config cuDNN's heuristics offer for
// the dynamic-shape graph itself (the same engine and knobs); where cuDNN refuses
// dynamic shapes (for the structure's operation graph or for one engine config)
// the cache records that, and that config is built for its dims alone from then
// on, never tried again. Precompiled engines never use it. The plan files
// (plan_store.h) keep each cache's contents, so a warm start of a new batch
// size compiles nothing either.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/cudnn/backend.h"
#include "core/cudnn/graph.h"
#include "core/cudnn/plan.h"
#include "core/numerics.h"

namespace loom::cudnn {

// FNV-1a over a key's policy, device and values: PlanKey and StructureKey hash alike.
size_t key_hash(const NumericsPolicy& policy, int device, const std::vector<int64_t>& values);

// The graph's canonical form (Graph::append_canonical) with the batch left
// out: the extent and stride at the batch position of every tensor but the
// weights. The batch position is dim 1 in a graph with a matmul node (its
// operands are (1, M, K)) and dim 0 otherwise; the batch is that dim of the
// graph's first tensor (every Loom graph lists an activation first); conv
// filters and matmul B operands are weights. A tensor dim left out is one at
// the batch position that equals the batch, so graphs with one form differ at
// most in their batch size.
std::vector<int64_t> structure_form(const Graph& graph);

// What identifies a kernel cache: structure_form(), the policy, the device.
class StructureKey {
 public:
  StructureKey(const Graph& graph, const NumericsPolicy& policy, int device);

  bool operator==(const StructureKey& other) const;
  size_t hash() const { return hash_; }
  const NumericsPolicy& policy() const { return policy_; }
  int device() const { return device_; }
  const std::vector<int64_t>& values() const { return values_; }

 private:
  NumericsPolicy policy_;
  int device_;
  std::vector<int64_t> values_;
  size_t hash_;
};

struct StructureKeyHash {
  size_t operator()(const StructureKey& key) const { return key.hash(); }
};

// Whether `graph`'s plans may use a kernel cache: graphs of pointwise and
// normalization nodes only (batch norm, ReLU, the fused BN+ReLU block: the
// runtime-compiled graphs every step and every tail batch builds), with every
// tensor's pointer aligned to 16 bytes. Convolutions, matmuls, reductions and
// pooling keep static builds: with the cache on, pooling and the sweeps that
// use it failed on the H100 with cudaErrorMisalignedAddress. A tensor at a
// smaller alignment (a view at an odd offset) keeps the static build too:
// what a dynamic-shape kernel assumes of its pointers is not documented.
bool kernel_cache_applies(const Graph& graph);

// "engine 12 TILE_SIZE=3,STAGES=2": the kernel a config names, whatever its graph's dims.
std::string kernel_name(const PlanNotes& notes);

// What the plan files keep of a kernel cache: cuDNN's serialized contents and
// the kernels the selections chose (kernel_name each).
struct StoredKernels {
  std::string contents;
  std::vector<std::string> chosen;
};

// PlanCache makes each one in a shared_ptr, which the plans finalized with it share.
class KernelCache : public std::enable_shared_from_this<KernelCache> {
 public:
  // `stored`: from an earlier process (empty when none).
  KernelCache(StructureKey key, StoredKernels stored);
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  const StructureKey& key() const { return key_; }

  // Whether to build `notes`' config for dynamic shapes: not once cuDNN refused
  // them for this structure or for that kernel.
  bool may_try(const PlanNotes& notes) const;
  // Records that cuDNN refused dynamic shapes for the whole structure (its
  // operation graph did not finalize with them) or for one kernel.
  void refuse_structure();
  void refuse(const PlanNotes& notes);

  // Finalizing a plan with the cache holds this: the descriptor is not known to
  // be safe for concurrent use, and a second build of the same structure then
  // finds the first one's kernel.
  std::unique_lock<std::mutex> lock_for_build() { return std::unique_lock<std::mutex>(build_mutex_); }
  // With lock_for_build() held: the cuDNN descriptor, made at the first call
  // from the stored contents (when they still load) and `graph`, a
  // dynamic-shape graph of this structure, which it keeps. Null, and the
  // structure refused, when cuDNN will not make it.
  const Descriptor* bind(std::shared_ptr<const BuiltGraph> graph);
  // With lock_for_build() held, after bind(): the size of cuDNN's serialized
  // contents; a finalize that leaves it unchanged compiled nothing. (cuDNN
  // 9.19 has no entry count; IS_ENGINECFG_KERNEL_CACHED, read as a get with
  // the config passed in, never answered "cached" on the H100, and a get may
  // write into the descriptor it is handed.) Nullopt when cuDNN cannot
  // serialize the cache.
  std::optional<int64_t> contents_bytes() const;
  // With lock_for_build() held: a plan was finalized with the cache.
  void record(const PlanNotes& notes);

  // Kernels the selections for this structure chose (tried first for other
  // batch sizes: their heuristics may rank a config whose kernel is not cached).
  bool was_chosen(const PlanNotes& notes) const;
  void remember_chosen(const PlanNotes& notes);

  // What to save, when a kernel was compiled into the cache since the last
  // call (for the plan files); nullopt otherwise or when cuDNN cannot
  // serialize the cache.
  std::optional<StoredKernels> take_unsaved();

  int64_t reused() const { return reused_.load(); }      // plans finalized without compiling
  int64_t compiled() const { return compiled_.load(); }  // kernels compiled into the cache
  int64_t refused() const;                                // kernels (or the structure) refused

 private:
  StructureKey key_;

  std::mutex build_mutex_;
  std::string stored_;
  // Declared before cache_, so the descriptor goes before the graph it was made with.
  std::shared_ptr<const BuiltGraph> graph_;
  std::optional<Descriptor> cache_;
  bool unsaved_ = false;

  mutable std::mutex state_mutex_;
  bool structure_refused_ = false;
  std::set<std::string> refused_, chosen_;

  std::atomic<int64_t> reused_ = 0, compiled_ = 0;
};

}  // namespace loom::cudnn
