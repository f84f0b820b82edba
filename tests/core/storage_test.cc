// File: tests/core/storage_test.cc
// Host storage: blocks above glibc's largest mmap threshold (32 MiB) come from
// Loom's cache, are handed out again once freed, never overlap while alive and
// keep their bytes; the storage byte counter follows them as it does small ones.
#include "core/storage.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/storage_stats.h"

namespace loom {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

uintptr_t address(const Storage& s) { return reinterpret_cast<uintptr_t>(s.data()); }

bool overlap(const Storage& a, const Storage& b) {
  return address(a) < address(b) + b.nbytes() && address(b) < address(a) + a.nbytes();
}

TEST_CASE("a freed large host block is handed out again, to the same size or a smaller large one") {
  void* first = nullptr;
  {
    Storage a(48 * kMiB, Device::cpu());
    first = a.data();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  }
  {
    Storage again(48 * kMiB, Device::cpu());
    CHECK(again.data() == first);
  }
  Storage smaller(40 * kMiB + 3, Device::cpu());  // best fit: the cached 48 MiB block, split
  CHECK(smaller.data() == first);
}

TEST_CASE("live large host blocks never overlap and keep their bytes") {
  const size_t before = storage_bytes_in_use(DeviceType::CPU);
  std::vector<std::unique_ptr<Storage>> live;
  const size_t sizes[] = {33 * kMiB, 40 * kMiB + 1, 33 * kMiB, 64 * kMiB};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    live.push_back(std::make_unique<Storage>(sizes[i], Device::cpu()));
    std::memset(live.back()->data(), static_cast<int>(i + 1), sizes[i]);
  }
  CHECK(storage_bytes_in_use(DeviceType::CPU) == before + 170 * kMiB + 1);
  live[1].reset();  // freed between two live blocks, then taken again by a smaller request
  live[1] = std::make_unique<Storage>(34 * kMiB, Device::cpu());
  std::memset(live[1]->data(), 9, 34 * kMiB);
  for (size_t i = 0; i < live.size(); ++i) {
    for (size_t j = i + 1; j < live.size(); ++j) CHECK_FALSE(overlap(*live[i], *live[j]));
  }
  const auto* bytes = static_cast<const unsigned char*>(live[3]->data());
  CHECK(bytes[0] == 4);
  CHECK(bytes[64 * kMiB - 1] == 4);
  CHECK(static_cast<const unsigned char*>(live[2]->data())[33 * kMiB - 1] == 3);
  CHECK(static_cast<const unsigned char*>(live[0]->data())[33 * kMiB - 1] == 1);
  live.clear();
  CHECK(storage_bytes_in_use(DeviceType::CPU) == before);
}

TEST_CASE("threads allocating and freeing large host blocks at once each keep their own bytes") {
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int round = 0; round < 8; ++round) {
        const size_t bytes = (33 + static_cast<size_t>(t)) * kMiB;
        Storage s(bytes, Device::cpu());
        auto* data = static_cast<unsigned char*>(s.data());
        std::memset(data, t + 1, bytes);
        std::this_thread::yield();
        if (data[0] != t + 1 || data[bytes / 2] != t + 1 || data[bytes - 1] != t + 1) ++wrong[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

}  // namespace
}  // namespace loom
