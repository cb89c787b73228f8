// The end of a scatter-add into a 16-bit float array (Embedding's and take's gradients): atomicAdd
// has no bfloat16 or float16 form that sums in float, so those kernels add into a float32 buffer
// (internal/scatter_sum.h), which this kernel then stores into the array, rounded once.
#pragma once

#include "common.cuh"

namespace weft {

// y = sum, or y + sum (as req says), n elements.
template <typename T>
__global__ void StoreScatterSum(const typename Arith<T>::type* sum, T* y, int64 n, int req) {
  for (int64 e = GlobalThread(); e < n; e += GridThreads()) {
    const typename Arith<T>::type v[1] = {sum[e]};
    StoreN<1>(y + e, v, req);
  }
}

}  // namespace weft
