// The random numbers of every device, written once: Philox4x32-10 (Salmon et al., SC'11), the
// uniform float drawn from one of its 32-bit numbers, and Dropout's keep rule. The host compiler
// includes this header for storage/random.cc and the CPU ops, and NVRTC, embedded, for the GPU
// kernels (ops/gpu/kernels/philox.cuh, dropout.cuh), so a RandomKey gives the same numbers on the
// CPU and on a GPU by construction (tests/gpu_philox_test.cc checks it number for number).
//
// Block b of a RandomKey's range is PhiloxBlockAt(seed, offset + b), and its four numbers are the
// range's numbers 4b .. 4b + 3 (storage/random.h).
//
//   PhiloxBlock bits = PhiloxBlockAt(seed, offset + b);
//   bool keep = DropoutKeeps(PhiloxUniform(bits.v[0]), p);
#pragma once

#include "core/host_device.h"

namespace weft {

// Four 32-bit numbers: a counter, or the block Philox4x32 makes of it.
struct PhiloxBlock {
  unsigned int v[4];
};

// The high 32 bits of a * b.
WEFT_HOST_DEVICE inline unsigned int PhiloxMulHi(unsigned int a, unsigned int b) {
#if defined(__CUDACC_RTC__)
  return __umulhi(a, b);
#else
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
#endif
}

// Philox4x32-10 of a 128-bit counter and the 64-bit key (k0, k1).
WEFT_HOST_DEVICE inline PhiloxBlock Philox4x32(PhiloxBlock ctr, unsigned int k0, unsigned int k1) {
  const unsigned int kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  unsigned int c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
#if defined(__CUDACC_RTC__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const unsigned int hi0 = PhiloxMulHi(kM0, c0), lo0 = kM0 * c0;
    const unsigned int hi1 = PhiloxMulHi(kM1, c2), lo1 = kM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return PhiloxBlock{{c0, c1, c2, c3}};
}

// Block `counter` of the stream of `seed`: counter {lo(counter), hi(counter), 0, 0}, key
// {lo(seed), hi(seed)}.
WEFT_HOST_DEVICE inline PhiloxBlock PhiloxBlockAt(unsigned long long seed,
                                                  unsigned long long counter) {
  const PhiloxBlock ctr{
      {static_cast<unsigned int>(counter), static_cast<unsigned int>(counter >> 32), 0u, 0u}};
  return Philox4x32(ctr, static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32));
}

// A uniform float in [0, 1) from one number: its top 24 bits.
WEFT_HOST_DEVICE inline float PhiloxUniform(unsigned int bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Dropout with drop probability p keeps an element when its uniform number, compared in double,
// is at least p.
WEFT_HOST_DEVICE inline bool DropoutKeeps(float uniform, double p) {
  return static_cast<double>(uniform) >= p;
}

}  // namespace weft
