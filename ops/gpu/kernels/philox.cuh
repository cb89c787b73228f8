// Philox4x32-10, exactly as storage/random.cc computes it on the CPU: block b of a RandomKey's
// range is Philox4x32(counter = {lo(offset + b), hi(offset + b), 0, 0}, key = {lo(seed),
// hi(seed)}), and its four numbers are the range's numbers 4b .. 4b + 3. So a GPU op draws the
// same numbers as a CPU op given the same key.
#pragma once

#include "common.cuh"

namespace weft {

struct PhiloxBlock {
  unsigned int v[4];
};

__device__ inline PhiloxBlock Philox4x32(unsigned long long seed, unsigned long long counter) {
  const unsigned int kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  unsigned int c0 = static_cast<unsigned int>(counter),
               c1 = static_cast<unsigned int>(counter >> 32), c2 = 0, c3 = 0;
  unsigned int k0 = static_cast<unsigned int>(seed), k1 = static_cast<unsigned int>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const unsigned int hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    const unsigned int hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// PhiloxStream::Uniform: the top 24 bits, in [0, 1).
__device__ inline float PhiloxUniform(unsigned int bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// out[i] = number i of the range (seed, offset), for i < n: what PhiloxStream::NextU32 draws.
__global__ void PhiloxRaw(unsigned long long seed, unsigned long long offset, unsigned int* out,
                          int64 n) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    out[i] = Philox4x32(seed, offset + static_cast<unsigned long long>(i / 4)).v[i % 4];
  }
}

}  // namespace weft
