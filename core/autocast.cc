// File: core/autocast.cc
// The thread's autocast dtype, the per-operand cast the autocast ops share, and
// the cache of parameter casts.
#include "core/autocast.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/storage.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#endif

namespace loom {

namespace {

thread_local std::optional<DType> current_dtype;

// A parameter's cast, valid while the parameter's storage lives, its version
// is unchanged (every in-place write bumps it: the optimizer step, copy_) and
// no CUDA-graph replay has run since (a replay writes without bumping).
struct CachedCast {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
  uint64_t replays = 0;
  Tensor cast;  // detached: each use records its own cast node
};

// (storage, offset, sizes, strides, target dtype): one view of a parameter.
using CastKey = std::tuple<const Storage*, int64_t, Shape, Shape, DType>;

thread_local std::map<CastKey, CachedCast> cast_cache;

uint64_t replays_so_far() {
#ifdef LOOM_WITH_CUDA
  return cuda::replay_count();
#else
  return 0;
#endif
}

// Inside a capture every cast must be a node of the graph, so that each replay
// recasts the weights the replayed optimizer step has just changed.
bool capturing() {
#ifdef LOOM_WITH_CUDA
  return cuda::is_capturing();
#else
  return false;
#endif
}

bool cache_enabled() {
  const char* value = std::getenv("LOOM_AUTOCAST_CACHE");
  return value == nullptr || std::string_view(value) != "0";
}

// Only parameters are cached: leaves that require grad, reused across the
// forwards of one autocast region (several micro-batches, evaluation batches).
bool cacheable(const Tensor& t) {
  return t.is_leaf() && t.requires_grad() && cache_enabled() && !capturing();
}

// t (a parameter) cast to `target`, without a graph node: from the cache when
// still valid, else cast now and remembered.
Tensor cached_cast(const Tensor& t, DType target) {
  const CastKey key{t.storage().get(), t.storage_offset(), t.sizes(), t.strides(), target};
  const uint64_t version = t.storage()->version(), replays = replays_so_far();
  auto it = cast_cache.find(key);
  if (it != cast_cache.end() && it->second.storage.lock() == t.storage() &&
      it->second.version == version && it->second.replays == replays) {
    return it->second.cast.detach();
  }
  Tensor cast = t.detach().to(target);
  cast_cache[key] = {t.storage(), version, replays, cast};
  return cast.detach();
}

}  // namespace

std::optional<DType> autocast_dtype() { return current_dtype; }

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(current_dtype) {
  LOOM_CHECK(!dtype || *dtype == DType::BFloat16 || *dtype == DType::Float16, ValueError,
             "[autocast] computes in bfloat16 or float16, got {}; use DType::BFloat16 (or "
             "nullopt to turn autocast off)",
             dtype_name(*dtype));
  current_dtype = dtype;
}

// Leaving autocast drops the cached casts, as torch.autocast does: the next
// region starts from the parameters as they are then.
AutocastGuard::~AutocastGuard() {
  current_dtype = previous_;
  if (!current_dtype) cast_cache.clear();
}

Tensor autocast_operand(const Tensor& t) {
  if (!current_dtype || !t.defined() || !t.device().is_cuda() || !is_floating(t.dtype())) return t;
  if (t.dtype() == *current_dtype || !cacheable(t)) return t.to(*current_dtype);
  Tensor out = cached_cast(t, *current_dtype);
  if (needs_grad({t})) {
    const DType source = t.dtype();
    record("to_dtype", {t}, out, [source](const Tensor& dy) {
      return std::vector<Tensor>{dy.to(source)};
    });
  }
  return out;
}

}  // namespace loom
