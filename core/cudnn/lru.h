// File: core/cudnn/lru.h
// A least-recently-used map of bounded size: the plan cache's storage
// (plan_cache.h). Not thread-safe: its owner guards it. No CUDA here, so it is
// unit-tested on the CPU.
//
//   Lru<Key, Value, KeyHash> lru(capacity);
//   if (Value* v = lru.find(key)) use(*v);       // now the most recently used
//   else lru.insert(key, make()), lru.evict_over_capacity();
#pragma once

#include <algorithm>
#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>

namespace loom::cudnn {

template <class Key, class Value, class Hash>
class Lru {
 public:
  explicit Lru(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

  // The value of `key`, made the most recently used; null when absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    items_.splice(items_.begin(), items_, it->second);
    return &it->second->second;
  }
  // The value of `key` without touching its recency; null when absent.
  const Value* peek(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  Value* peek(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->second;
  }
  bool contains(const Key& key) const { return index_.contains(key); }

  // Adds `key` (absent) as the most recently used. The reference stays valid
  // until the key is evicted or the map cleared.
  Value& insert(const Key& key, Value value) {
    items_.emplace_front(key, std::move(value));
    index_.emplace(key, items_.begin());
    return items_.front().second;
  }
  // Drops the least recently used keys beyond the capacity; returns how many.
  // The most recently used key always stays (the capacity is at least 1).
  size_t evict_over_capacity() {
    size_t evicted = 0;
    while (items_.size() > capacity_) {
      index_.erase(items_.back().first);
      items_.pop_back();
      ++evicted;
    }
    return evicted;
  }
  // Takes effect at the next evict_over_capacity().
  void set_capacity(size_t capacity) { capacity_ = std::max<size_t>(capacity, 1); }
  size_t capacity() const { return capacity_; }
  size_t size() const { return items_.size(); }
  void clear() {
    items_.clear();
    index_.clear();
  }
  // Calls f(key, value) for every entry, the most recently used first.
  template <class F>
  void for_each(F f) const {
    for (const auto& [key, value] : items_) f(key, value);
  }

 private:
  std::list<std::pair<Key, Value>> items_;
  std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator, Hash> index_;
  size_t capacity_;
};

}  // namespace loom::cudnn
