// File: tests/core/cudnn/lru_test.cc
// The plan cache's LRU without a GPU: lookups refresh recency, eviction drops
// the least recently used beyond the capacity, the capacity is at least one.
#include "core/cudnn/lru.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace loom::cudnn {
namespace {

using IntLru = Lru<int, std::string, std::hash<int>>;

std::vector<int> keys_of(const IntLru& lru) {
  std::vector<int> keys;
  lru.for_each([&keys](int key, const std::string&) { keys.push_back(key); });
  return keys;
}

TEST_CASE("find refreshes a key, peek does not, eviction drops the oldest") {
  IntLru lru(2);
  lru.insert(1, "one");
  lru.insert(2, "two");
  CHECK(keys_of(lru) == std::vector<int>{2, 1});
  REQUIRE(lru.find(1) != nullptr);
  CHECK(*lru.find(1) == "one");
  CHECK(keys_of(lru) == std::vector<int>{1, 2});
  REQUIRE(lru.peek(2) != nullptr);
  CHECK(keys_of(lru) == std::vector<int>{1, 2});
  lru.insert(3, "three");
  CHECK(lru.evict_over_capacity() == 1);
  CHECK(keys_of(lru) == std::vector<int>{3, 1});
  CHECK(lru.find(2) == nullptr);
  CHECK_FALSE(lru.contains(2));
}

TEST_CASE("the capacity is at least one and applies at the next eviction") {
  IntLru lru(0);
  CHECK(lru.capacity() == 1);
  lru.insert(1, "one");
  lru.insert(2, "two");
  lru.set_capacity(5);
  CHECK(lru.evict_over_capacity() == 0);
  lru.set_capacity(0);
  CHECK(lru.evict_over_capacity() == 1);
  CHECK(keys_of(lru) == std::vector<int>{2});
  lru.clear();
  CHECK(lru.size() == 0);
  CHECK(lru.find(2) == nullptr);
}

// Random operations against a plain list kept most recent first.
TEST_CASE("random operations match a reference list") {
  std::mt19937 rng(36);
  const size_t capacity = 1 + rng() % 6;
  IntLru lru(capacity);
  std::vector<int> reference;  // most recently used first
  for (int step = 0; step < 2000; ++step) {
    const int key = static_cast<int>(rng() % 10);
    auto it = std::find(reference.begin(), reference.end(), key);
    if (rng() % 2 == 0) {
      const bool found = lru.find(key) != nullptr;
      REQUIRE(found == (it != reference.end()));
      if (found) {
        reference.erase(it);
        reference.insert(reference.begin(), key);
      }
    } else if (it == reference.end()) {
      lru.insert(key, std::to_string(key));
      reference.insert(reference.begin(), key);
      const size_t expected = reference.size() > capacity ? reference.size() - capacity : 0;
      reference.resize(std::min(reference.size(), capacity));
      REQUIRE(lru.evict_over_capacity() == expected);
    }
    REQUIRE(keys_of(lru) == reference);
  }
}

}  // namespace
}  // namespace loom::cudnn
