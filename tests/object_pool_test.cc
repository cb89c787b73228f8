// ObjectPool (core/object_pool.h): every object handed out is distinct and constructed, objects
// move between threads safely, a thread that exits gives its slots back, and the order in which
// one thread frees objects does not scatter what another thread gets next (slots come back in
// address order, which is what keeps a chain of ops after a burst as fast as one alone).
#include "core/object_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace weft {
namespace {

// Each test uses its own type, so that it sees a pool no other test has used.
template <int kTag>
struct Block {
  explicit Block(uint64_t v) : value(v) {}
  uint64_t value;
  uint64_t pad[31];  // 256 bytes, as an op block
};

// How many of the consecutive objects in `objects` lie right after the previous one.
template <typename T>
size_t Adjacent(const std::vector<T*>& objects) {
  size_t n = 0;
  for (size_t i = 1; i < objects.size(); ++i)
    n += reinterpret_cast<char*>(objects[i]) - reinterpret_cast<char*>(objects[i - 1]) == sizeof(T);
  return n;
}

TEST(ObjectPool, HandsOutDistinctConstructedObjects) {
  using B = Block<0>;
  std::vector<B*> objects;
  for (uint64_t i = 0; i < 3000; ++i) objects.push_back(ObjectPool<B>::New(i));
  std::set<B*> distinct(objects.begin(), objects.end());
  EXPECT_EQ(distinct.size(), objects.size());
  for (uint64_t i = 0; i < objects.size(); ++i) {
    EXPECT_EQ(objects[i]->value, i);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(objects[i]) % alignof(B), 0u);
  }
  for (B* b : objects) ObjectPool<B>::Delete(b);
}

TEST(ObjectPool, ObjectsFreedInAScrambledOrderElsewhereComeBackInAddressOrder) {
  using B = Block<1>;
  constexpr size_t kCount = 20000;
  std::vector<B*> objects;
  for (size_t i = 0; i < kCount; ++i) objects.push_back(ObjectPool<B>::New(i));
  std::thread freer([&] {
    std::shuffle(objects.begin(), objects.end(), std::mt19937(7));
    for (B* b : objects) ObjectPool<B>::Delete(b);
  });
  freer.join();
  std::vector<B*> again;
  for (size_t i = 0; i < kCount; ++i) again.push_back(ObjectPool<B>::New(i));
  // A scattered free list would put nearly every object far from the one before it.
  EXPECT_GT(Adjacent(again), kCount * 9 / 10);
  std::set<B*> distinct(again.begin(), again.end());
  EXPECT_EQ(distinct.size(), kCount);
  for (B* b : again) ObjectPool<B>::Delete(b);
}

TEST(ObjectPool, AThreadThatExitsGivesItsSlotsBack) {
  using B = Block<2>;
  std::set<B*> seen;
  for (int round = 0; round < 40; ++round) {
    std::vector<B*> objects;
    std::thread user([&] {
      for (uint64_t i = 0; i < 1000; ++i) objects.push_back(ObjectPool<B>::New(i));
      for (B* b : objects) ObjectPool<B>::Delete(b);
    });
    user.join();
    seen.insert(objects.begin(), objects.end());
  }
  // Without the hand-back every thread would take fresh slots: 40,000 addresses.
  EXPECT_LE(seen.size(), 2000u);
}

// Threads make objects, pass some to each other and free them there; no object is handed out
// twice (its value would be overwritten) and TSAN sees no race.
TEST(ObjectPool, ObjectsMoveBetweenThreads) {
  using B = Block<3>;
  constexpr int kThreads = 4;
  std::mutex mu;
  std::vector<B*> passed;  // guarded by mu
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<B*> mine;
      for (uint64_t i = 0; i < 20000; ++i) {
        const uint64_t value = static_cast<uint64_t>(t) << 32 | i;
        mine.push_back(ObjectPool<B>::New(value));
        ASSERT_EQ(mine.back()->value, value);
        if (rng() % 3 == 0) {
          std::lock_guard<std::mutex> lock(mu);
          passed.push_back(mine.back());
          mine.pop_back();
        }
        if (mine.size() > 300 || rng() % 5 == 0) {
          std::lock_guard<std::mutex> lock(mu);
          for (int k = 0; k < 8 && !passed.empty(); ++k) {
            ObjectPool<B>::Delete(passed.back());
            passed.pop_back();
          }
        }
        if (!mine.empty() && rng() % 2 == 0) {
          std::swap(mine[rng() % mine.size()], mine.back());
          EXPECT_EQ(mine.back()->value >> 32, static_cast<uint64_t>(t));
          ObjectPool<B>::Delete(mine.back());
          mine.pop_back();
        }
      }
      for (B* b : mine) ObjectPool<B>::Delete(b);
    });
  }
  for (std::thread& t : threads) t.join();
  for (B* b : passed) ObjectPool<B>::Delete(b);
}

}  // namespace
}  // namespace weft
