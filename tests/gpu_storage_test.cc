// GPU memory and GPU NDArrays: pooling, stream-ordered frees, out-of-memory errors, copies in
// both directions, initialization with the same numbers as on the CPU, views, errors.
#include "storage/gpu/gpu_storage.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/gpu/cuda_check.h"
#include "engine/gpu/gpu_stream.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "storage/storage.h"
#include "storage/workspace.h"
#include "tests/gpu_stream_gate.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

const Device kGpu = Device::Gpu(0);

TEST(GpuStorage, FreedBlocksAreReusedAndCounted) {
  Storage& pool = *Storage::Get(kGpu);
  Block a = pool.Alloc(1000);
  ASSERT_NE(a.ptr, nullptr);
  EXPECT_EQ(a.size, StorageSizeClass(1000));
  cudaPointerAttributes attrs{};
  WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attrs, a.ptr));
  EXPECT_EQ(attrs.type, cudaMemoryTypeDevice);
  const StorageStats before = pool.Stats();
  pool.Free(a);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  Block b = pool.Alloc(1000);
  EXPECT_EQ(b.ptr, a.ptr);
  EXPECT_EQ(pool.Stats().reuses, before.reuses + 1);
  pool.Free(b);
}

// A block freed after work that cannot have run yet (it waits behind a gate on its stream) is
// not handed out again until the stream has done that work. Between the gate and Open() the test
// only queues work, queries events and takes a block from the pool's cache (no cudaMalloc, no
// wait for the device), so nothing it does waits for the gated stream; the stream is
// non-blocking, so not even work on the legacy stream would.
TEST(GpuStorage, AStreamOrderedFreeWaitsForTheStream) {
  Storage& pool = *Storage::Get(kGpu);
  engine::GpuStream stream(0, {.blocking = false});
  Block a = pool.Alloc(1 << 20);
  pool.Free(pool.Alloc(1 << 20));  // a cached block of a's size class, for the Alloc below
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
  testing::StreamGate gate(stream);
  stream.Memset(a.ptr, 0, a.size);  // queued behind the gate: still to run
  pool.FreeAfter(a, &stream);
  Block b = pool.Alloc(1 << 20);
  EXPECT_NE(b.ptr, a.ptr) << "a block was handed out while its stream could still write it";
  gate.Open();
  stream.Synchronize();
  Block c = pool.Alloc(1 << 20);
  EXPECT_EQ(c.ptr, a.ptr) << "once the stream is done the block comes back";
  pool.Free(b), pool.Free(c);
}

TEST(GpuStorage, OutOfMemorySaysHowMuchWasAskedAndHeld) {
  Storage& pool = *Storage::Get(kGpu);
  Block held = pool.Alloc(1 << 20);
  testing::ExpectErrorContains(
      [&] { pool.Alloc(size_t{1} << 50); },
      {"out of memory on gpu:0", "asked for 1125899906842624 bytes", "bytes in use", "cached"});
  Block after = pool.Alloc(1 << 20);  // still usable
  EXPECT_NE(after.ptr, nullptr);
  pool.Free(held), pool.Free(after);
}

TEST(GpuStorage, PinnedHostMemoryIsPageLocked) {
  Block b = gpu::PinnedHostStorage()->Alloc(4096);
  cudaPointerAttributes attrs{};
  WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attrs, b.ptr));
  EXPECT_EQ(attrs.type, cudaMemoryTypeHost);
  gpu::PinnedHostStorage()->Free(b);
}

TEST(GpuNDArray, CopiesWithPageableMemoryAreStagedThroughPinnedMemory) {
  Storage& pinned = *gpu::PinnedHostStorage();
  const size_t before = pinned.Stats().allocations;
  std::vector<float> values(1 << 20);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000);
  NDArray gpu = NDArray::FromVector(values, Shape{1 << 20}).Copy(kGpu);  // host to device
  NDArray host(Shape{1 << 20});
  gpu.CopyTo(host);  // device to host
  EXPECT_EQ(host.ToVector<float>(), values);
  EXPECT_GE(pinned.Stats().allocations, before + 2)
      << "both directions stage through pinned memory";
}

TEST(GpuNDArray, CopiesBothWaysAndBetweenGpuArrays) {
  std::vector<float> values(1 << 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  NDArray host = NDArray::FromVector(values, Shape{256, 256});
  NDArray gpu = host.Copy(kGpu);
  EXPECT_EQ(gpu.device(), kGpu);
  NDArray gpu2 = gpu.Copy(kGpu);
  NDArray back = gpu2.Copy(Device::Cpu());
  EXPECT_EQ(back.ToVector<float>(), values);
  EXPECT_EQ(gpu2.ToVector<float>(), values);
  // Views of GPU arrays copy only their part.
  EXPECT_EQ(gpu.Slice(1, 2).ToVector<float>(),
            std::vector<float>(values.begin() + 256, values.begin() + 512));
}

TEST(GpuNDArray, InitializersGiveTheSameNumbersAsOnTheCpu) {
  SeedRandom(7);
  NDArray cpu(Shape{1000}), gpu(Shape{1000}, kGpu);
  cpu.FillUniform(-1, 1);
  NDArray cpu_n(Shape{1000});
  cpu_n.FillNormal(0, 2);
  SeedRandom(7);
  gpu.FillUniform(-1, 1);
  NDArray gpu_n(Shape{1000}, kGpu);
  gpu_n.FillNormal(0, 2);
  EXPECT_EQ(gpu.ToVector<float>(), cpu.ToVector<float>());
  EXPECT_EQ(gpu_n.ToVector<float>(), cpu_n.ToVector<float>());
  NDArray filled(Shape{3, 5}, kGpu);
  filled.Fill(2.5);
  EXPECT_EQ(filled.ToVector<float>(), std::vector<float>(15, 2.5f));
  filled.Fill(0);
  EXPECT_EQ(filled.ToVector<float>(), std::vector<float>(15, 0.f));
  EXPECT_EQ(NDArray::Arange(4, 1, 2, kGpu).ToVector<float>(), (std::vector<float>{1, 3, 5, 7}));
}

TEST(GpuNDArray, ManyArraysComeAndGoWithoutGrowingThePool) {
  Storage& pool = *Storage::Get(kGpu);
  constexpr int64_t n = 1 << 20;  // 4 MB per array: 200 of them would be 800 MB without reuse
  NDArray src = NDArray::FromVector(std::vector<float>(n, 1.f), Shape{n});
  pool.ResetPeak();
  const StorageStats before = pool.Stats();
  for (int i = 0; i < 200; ++i) {
    NDArray g = src.Copy(kGpu);
    g.Fill(static_cast<double>(i));
    if (i % 20 == 0) g.WaitToRead();  // pushing may run ahead of the GPU, but not forever
  }
  NDArray last(Shape{n}, kGpu);
  last.Fill(3);
  EXPECT_EQ(last.ToVector<float>()[17], 3.f);
  const StorageStats stats = pool.Stats();
  EXPECT_LT(stats.peak_bytes_in_use, size_t{200} << 20);
  EXPECT_GT(stats.reuses, before.reuses + 100);
}

TEST(GpuNDArray, WorkspaceBelongsToTheStream) {
  // Stand-ins for two workers' streams: Workspace::For only tells them apart.
  engine::RunContext a{kGpu, reinterpret_cast<engine::GpuStream*>(0x10), 0};
  engine::RunContext b{kGpu, reinterpret_cast<engine::GpuStream*>(0x20), 0};
  Workspace& wa = Workspace::For(a);
  Workspace& wb = Workspace::For(b);
  EXPECT_NE(&wa, &wb);
  EXPECT_EQ(&Workspace::For(a), &wa);
  EXPECT_NE(&Workspace::For(engine::RunContext{Device::Cpu(), nullptr, 0}), &wa);
}

TEST(GpuNDArray, MismatchedCopiesAreRejected) {
  NDArray a(Shape{2, 3}, kGpu), b(Shape{3, 2});
  testing::ExpectErrorContains([&] { a.CopyTo(b); }, {"CopyTo", "(2, 3)", "(3, 2)"});
  testing::ExpectErrorContains([&] { NDArray(Shape{2}, Device::Gpu(15)); }, {"gpu:15"});
}

}  // namespace
}  // namespace weft
