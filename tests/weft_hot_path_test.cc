// The imperative hot path: a small op called repeatedly on the CPU runs on the calling thread
// once its inputs are ready, and allocates nothing on the heap in its steady state (shape
// inference is remembered, the engine's records come from per-thread pools). Heap allocations are
// counted by replacing the global operator new in this test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "weft/weft.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace weft {
namespace {

TEST(ImperativeHotPath, SmallInPlaceAddAllocatesNothingInItsSteadyState) {
  NDArray a(Shape{4}), b(Shape{4});
  a.Fill(0);
  b.Fill(1);
  for (int i = 0; i < 2000; ++i) a += b;  // warm-up: pools, the inference cache
  a.WaitToRead();
  const long before = g_allocations.load();
  for (int i = 0; i < 1000; ++i) a += b;
  const long during = g_allocations.load() - before;
  EXPECT_EQ(during, 0) << "heap allocations in 1,000 in-place adds";
  EXPECT_EQ(a.ToVector<float>(), std::vector<float>(4, 3000.0f));
}

TEST(ImperativeHotPath, RepeatedCallsStillCheckTheirShapes) {
  NDArray a(Shape{4}), b(Shape{4}), c(Shape{3});
  a.Fill(1);
  b.Fill(2);
  c.Fill(3);
  for (int i = 0; i < 3; ++i) {
    NDArray s = a + b;  // remembered
    EXPECT_EQ(s.ToVector<float>(), std::vector<float>(4, 3.0f));
    EXPECT_THROW(a + c, Error) << "call " << i
                               << ": (4) + (3) must not match the remembered (4) + (4)";
    EXPECT_THROW(a += c, Error);
  }
}

}  // namespace
}  // namespace weft
