// storage: the pooled allocator reuses freed blocks, keeps statistics, releases its cache; the
// workspace grows and is reused; random streams are reproducible.
#include "storage/storage.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "storage/random.h"
#include "storage/workspace.h"

namespace weft {
namespace {

TEST(Storage, SizeClassesWasteAtMostAQuarter) {
  EXPECT_EQ(StorageSizeClass(1), 64u);
  EXPECT_EQ(StorageSizeClass(64), 64u);
  EXPECT_EQ(StorageSizeClass(65), 128u);
  for (size_t n : {100u, 1000u, 4097u, 100000u, 12345678u}) {
    const size_t c = StorageSizeClass(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c, n + n / 4 + 64) << n;
    EXPECT_EQ(c % 64, 0u) << n;
  }
}

TEST(Storage, FreedBlocksAreReusedAndCounted) {
  Storage& pool = *Storage::Get(Device::Cpu());
  pool.ReleaseCache();
  const StorageStats before = pool.Stats();
  Block a = pool.Alloc(1000);
  EXPECT_GE(a.size, 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.ptr) % 64, 0u) << "blocks are 64-byte aligned";
  EXPECT_EQ(pool.Stats().bytes_in_use, before.bytes_in_use + a.size);
  void* first = a.ptr;
  pool.Free(a);
  EXPECT_EQ(pool.Stats().bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(pool.Stats().bytes_cached, a.size);
  Block b = pool.Alloc(990);  // same size class
  EXPECT_EQ(b.ptr, first) << "a freed block of the same class is handed out again";
  EXPECT_EQ(pool.Stats().reuses, before.reuses + 1);
  pool.Free(b);
  pool.ReleaseCache();
  EXPECT_EQ(pool.Stats().bytes_cached, 0u);
}

TEST(Storage, PeakTracksTheHighWaterMark) {
  Storage& pool = *Storage::Get(Device::Cpu());
  pool.ResetPeak();
  const size_t base = pool.Stats().bytes_in_use;
  Block a = pool.Alloc(1 << 20), b = pool.Alloc(1 << 20);
  pool.Free(a);
  pool.Free(b);
  EXPECT_GE(pool.Stats().peak_bytes_in_use, base + (2u << 20));
  EXPECT_EQ(pool.Stats().bytes_in_use, base);
}

TEST(Storage, AnUnreachableDeviceIsAClearError) {
  try {
    Storage::Get(Device::Gpu(0));
    FAIL() << "a CPU-only build handed out GPU memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu:0"), std::string::npos) << e.what();
  }
}

TEST(Workspace, GrowsOnDemandAndIsReused) {
  Workspace& ws = Workspace::ForThisThread();
  void* small = ws.Get(100);
  EXPECT_EQ(ws.Get(50), small) << "a smaller request reuses the buffer";
  ws.Get(1 << 20);
  EXPECT_GE(ws.capacity(), size_t{1} << 20);
}

// An op's workspace holds what its largest request asked (in the pool's size class), no headroom
// beyond: a convolution's 53 MB Winograd scratchpad held 80 MB with half again, all of it counted
// in a training step's peak (bench/resnet_bench).
TEST(Workspace, HoldsTheLargestRequestWithoutHeadroom) {
  Workspace& ws = Workspace::ForThisThread();
  const size_t bytes = (size_t{40} << 20) + 12345;
  ws.Get(bytes);
  EXPECT_EQ(ws.capacity(), StorageSizeClass(bytes));
  ws.Get(bytes / 2);
  EXPECT_EQ(ws.capacity(), StorageSizeClass(bytes)) << "a smaller request keeps the buffer";
}

TEST(Random, PhiloxMatchesTheReferenceVectors) {
  // Known-answer tests from Random123 (kat_vectors): philox4x32, 10 rounds.
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, SameSeedSameNumbersAndRangesDoNotOverlap) {
  SeedRandom(123);
  RandomKey a = ReserveRandom(Device::Cpu(), 1000), b = ReserveRandom(Device::Cpu(), 10);
  SeedRandom(123);
  RandomKey a2 = ReserveRandom(Device::Cpu(), 1000);
  PhiloxStream s1(a), s2(a2), s3(b);
  std::set<uint32_t> first;
  for (int i = 0; i < 1000; ++i) {
    uint32_t x = s1.NextU32();
    EXPECT_EQ(x, s2.NextU32());
    first.insert(x);
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(first.count(s3.NextU32()), 0u) << "ranges overlap";
  double sum = 0;
  PhiloxStream u(ReserveRandom(Device::Cpu(), 20000));
  for (int i = 0; i < 10000; ++i) {
    float x = u.Uniform();
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace weft
