// The GPU side of storage/random.h: Philox4x32-10, its uniform numbers and Dropout's keep rule
// are core/philox.h, the code the CPU runs, so a GPU op draws the same numbers as a CPU op given
// the same key. PhiloxRaw exposes the raw numbers to tests/gpu_philox_test.cc.
#pragma once

#include "common.cuh"
#include "core/philox.h"

namespace weft {

// out[i] = number i of the range (seed, offset), for i < n: what PhiloxStream::NextU32 draws.
__global__ void PhiloxRaw(unsigned long long seed, unsigned long long offset, unsigned int* out,
                          int64 n) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    out[i] = PhiloxBlockAt(seed, offset + static_cast<unsigned long long>(i / 4)).v[i % 4];
  }
}

}  // namespace weft
