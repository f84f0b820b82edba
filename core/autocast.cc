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

// (storage, offset, sizes, strides, target dtype): one view of a parameter.
using CastKey = std::tuple<const Storage*, int64_t, Shape, Shape, DType>;

// When a cast was made: it stays valid while the parameter's version is
// unchanged (every in-place write bumps it: the optimizer step, copy_), no
// CUDA-graph replay has run since (a replay writes without bumping), and the
// capture it was made in (none: eager) is still the one running. Inside a
// capture a cast must be a node of that graph, so that every replay recasts
// the weights the replayed optimizer step has just changed.
struct CastStamp {
  uint64_t version = 0;
  uint64_t replays = 0;
  std::optional<uint64_t> capture;

  bool operator==(const CastStamp&) const = default;
};

// A parameter's cast, valid while its storage lives and its stamp is current.
// An entry whose cast was dropped (drop_casts) holds no memory and is only a
// hint: the parameter was used, so the next refresh recasts it with the rest.
struct CachedCast {
  std::weak_ptr<Storage> storage;
  DType source = DType::Float32;
  CastStamp stamp;
  bool used = false;  // asked for since a refresh last recast it (see refresh())
  Tensor cast;        // detached: each use records its own cast node; undefined in a hint
};

thread_local std::map<CastKey, CachedCast> cast_cache;

CastStamp stamp_now(const Storage& storage) {
#ifdef LOOM_WITH_CUDA
  DeviceGuard guard(storage.device());  // whether its device's stream is capturing
  const std::optional<uint64_t> capture =
      cuda::is_capturing() ? std::optional(cuda::capture_count()) : std::nullopt;
  return {storage.version(), cuda::replay_count(), capture};
#else
  return {storage.version(), 0, std::nullopt};
#endif
}

bool cache_enabled() {
  const char* value = std::getenv("LOOM_AUTOCAST_CACHE");
  return value == nullptr || std::string_view(value) != "0";
}

// Only parameters are cached: leaves that require grad, reused across the
// forwards of one autocast region (several micro-batches, evaluation batches)
// and recast together after each optimizer step.
bool cacheable(const Tensor& t) { return t.is_leaf() && t.requires_grad() && cache_enabled(); }

CastKey key_of(const Tensor& t, DType target) {
  return {t.storage().get(), t.storage_offset(), t.sizes(), t.strides(), target};
}

// The parameter view a key names, on its (live) storage.
Tensor view_of(const CastKey& key, std::shared_ptr<Storage> storage, DType source) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = std::get<1>(key);
  impl->sizes = std::get<2>(key);
  impl->strides = std::get<3>(key);
  impl->dtype = source;
  return Tensor(std::move(impl));
}

// Casts t (a parameter whose cast is missing or stale) anew, and with it every
// other parameter whose cast to the same dtype on the same device is stale too
// and was used since a refresh last recast it: after an optimizer step that is
// the whole model, so a step makes one launch (core/tensor.h, to_all) instead
// of one per parameter, and under CUDA-graph capture the graph holds that one
// launch. A parameter recast here but then not used (another model's, say) is
// left out of the next refresh, until it is asked for again; casts of freed
// parameters are dropped.
void refresh(const Tensor& t, DType target) {
  const CastKey key = key_of(t, target);
  std::vector<CastKey> keys{key};
  std::vector<Tensor> sources{t.detach()};
  for (auto it = cast_cache.begin(); it != cast_cache.end();) {
    std::shared_ptr<Storage> storage = it->second.storage.lock();
    if (!storage) {
      it = cast_cache.erase(it);
      continue;
    }
    const CachedCast& entry = it->second;
    // Staleness last: stamp_now switches to the storage's device, which the cheaper tests spare.
    if (it->first != key && entry.used && std::get<4>(it->first) == target &&
        storage->device() == t.device() && (!entry.cast.defined() || entry.stamp != stamp_now(*storage))) {
      keys.push_back(it->first);
      sources.push_back(view_of(it->first, storage, entry.source));
    }
    ++it;
  }
  const std::vector<Tensor> casts = to_all(sources, target);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::shared_ptr<Storage>& storage = sources[i].storage();
    cast_cache[keys[i]] = {storage, sources[i].dtype(), stamp_now(*storage), i == 0, casts[i]};
  }
}

// t (a parameter) cast to `target`, without a graph node: from the cache when
// still valid, else refreshed.
Tensor cached_cast(const Tensor& t, DType target) {
  const CastKey key = key_of(t, target);
  auto it = cast_cache.find(key);
  if (it != cast_cache.end() && it->second.cast.defined() && it->second.storage.lock() == t.storage() &&
      it->second.stamp == stamp_now(*t.storage())) {
    it->second.used = true;
    return it->second.cast.detach();
  }
  refresh(t, target);
  return cast_cache.at(key).cast.detach();
}

// Frees every cached cast but keeps the entries of live parameters as hints, so
// that the next region's (or capture's) first cast recasts them all in one launch.
void drop_casts() {
  for (auto it = cast_cache.begin(); it != cast_cache.end();) {
    if (it->second.storage.expired()) {
      it = cast_cache.erase(it);
      continue;
    }
    it->second.cast = Tensor();
    ++it;
  }
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

// Leaving autocast frees the cached casts, as torch.autocast does: the next
// region starts from the parameters as they are then. Which parameters were
// cast is kept (drop_casts), so a loop that opens a region per step, or a step
// captured after clear_autocast_cache, still casts its whole model in one
// launch rather than one per layer.
AutocastGuard::~AutocastGuard() {
  current_dtype = previous_;
  if (!current_dtype) drop_casts();
}

void clear_autocast_cache() { drop_casts(); }

Tensor autocast_operand(const Tensor& t) {
  if (!current_dtype || !t.defined() || !t.device().is_cuda() || !is_floating(t.dtype())) return t;
  if (t.dtype() == *current_dtype || !cacheable(t)) return t.to(*current_dtype);
  Tensor out = cached_cast(t, *current_dtype);
  if (needs_grad({t})) record_cast(t, out);
  return out;
}

}  // namespace loom
