#include "bench/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace bench {
namespace {

constexpr int kChains = 12;               // independent accumulators: hides the unit's latency
constexpr long kIterations = 20'000'000;  // about 0.1 s a run at 3 GHz

#if defined(__x86_64__) && defined(__GNUC__)
// GFLOP/s of one thread's FMA (bf16 false) or bfloat16 dot (bf16 true) chains.
__attribute__((target("avx512f,avx512bf16"))) double ThreadGflops(bool bf16) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1e-3f * i);
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  alignas(64) uint16_t ones[32];
  std::fill(ones, ones + 32, uint16_t{0x3f80});  // bfloat16 1.0
  const __m512bh x = (__m512bh)_mm512_load_si512(ones);
  const auto start = std::chrono::steady_clock::now();
  for (long it = 0; it < kIterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) {
      acc[i] = bf16 ? _mm512_dpbf16_ps(acc[i], x, x) : _mm512_fmadd_ps(acc[i], a, b);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  volatile float sink = lanes[0];  // keeps the chains
  (void)sink;
  return kIterations * kChains * (bf16 ? 64.0 : 32.0) / s / 1e9;
}

// The sum over `threads` threads running at once, best of three runs.
double Gflops(int threads, bool bf16) {
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    std::vector<double> each(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&each, t, bf16] { each[t] = ThreadGflops(bf16); });
    for (std::thread& t : pool) t.join();
    double total = 0;
    for (double g : each) total += g;
    best = std::max(best, total);
  }
  return best;
}
#endif

}  // namespace

CpuPeak MeasureCpuPeak(int threads) {
  CpuPeak peak;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) peak.fp32_gflops = Gflops(threads, false);
  if (__builtin_cpu_supports("avx512bf16")) peak.bf16_gflops = Gflops(threads, true);
#endif
  return peak;
}

}  // namespace bench
