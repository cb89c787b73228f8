// Runs a kernel of ops/gpu/kernels on the host, for tests on machines without a GPU: what the
// kernels use of CUDA (threadIdx, blockIdx, gridDim, __syncthreads, __shfl_xor_sync, __shared__
// and dynamic shared memory, bit casts), emulated with one std::thread per GPU thread and a
// barrier per block. A block's threads run at once (barriers work); blocks run one after another,
// so `__shared__` (and the dynamic array) is a function-level static shared by the running
// block's threads. Slow: for small problems only.
//
//   #include "tests/kernel_host_shim.h"       // before the kernel header
//   #include "ops/gpu/kernels/attention.cuh"
//   weft::testing::HostLaunch(blocks, kGpuBlock, [&] { weft::AttnForward<float, float, 4>(...); });
//
// Limits: __shfl_xor_sync must be called by every lane of a warp together (it is built on the
// warp's barrier), and warps are not emulated otherwise (no lockstep, no other intrinsics).
#pragma once

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
// A kernel's dynamic shared memory: 128 KB, static like its __shared__ arrays.
#define WEFT_DYNAMIC_SHARED(T, name) static T name[(128 << 10) / sizeof(T)]

struct ShimDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local ShimDim3 threadIdx, blockIdx, gridDim, blockDim;

namespace weft::testing::shim {
inline std::barrier<>* block_barrier = nullptr;
// One per warp of 32 threads, for __shfl_xor_sync: a shuffle orders its warp's lanes only, as on
// a GPU, so a race between warps that a missing __syncthreads leaves stays visible to
// ThreadSanitizer (the test runs under --config=tsan in CI).
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline std::vector<uint64_t> exchange;  // one slot per thread, for __shfl_xor_sync
}  // namespace weft::testing::shim

inline void __syncthreads() { weft::testing::shim::block_barrier->arrive_and_wait(); }

template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  namespace s = weft::testing::shim;
  std::barrier<>& warp = *s::warp_barriers[threadIdx.x / 32];
  std::memcpy(&s::exchange[threadIdx.x], &value, sizeof(T));
  warp.arrive_and_wait();
  T other;
  std::memcpy(&other, &s::exchange[threadIdx.x ^ static_cast<unsigned>(lane_mask)], sizeof(T));
  warp.arrive_and_wait();
  return other;
}

inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline long long min(long long a, long long b) { return a < b ? a : b; }

namespace weft::testing {

// Runs `kernel` (a call of the kernel with its arguments) as a grid of `blocks` blocks of
// `threads` threads.
inline void HostLaunch(unsigned blocks, unsigned threads, const std::function<void()>& kernel) {
  for (unsigned b = 0; b < blocks; ++b) {
    std::barrier<> barrier(threads);
    shim::block_barrier = &barrier;
    shim::exchange.assign(threads, 0);
    shim::warp_barriers.clear();
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
      shim::warp_barriers.push_back(
          std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, b, t] {
        threadIdx = {t, 0, 0};
        blockIdx = {b, 0, 0};
        gridDim = {blocks, 1, 1};
        blockDim = {threads, 1, 1};
        kernel();
      });
    }
    for (std::thread& th : pool) th.join();
  }
}

}  // namespace weft::testing
