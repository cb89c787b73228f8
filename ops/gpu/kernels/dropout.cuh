// Dropout in training, as ops/cpu/dropout.cc computes it: element i is kept (times `scale`, 1/(1-p)
// rounded to T) when the i-th uniform number of the op's random range passes DropoutKeeps
// (core/philox.h). One thread per Philox block of four elements.
#pragma once

#include "common.cuh"
#include "core/philox.h"

namespace weft {

// y = x * mask and mask = keep ? scale : 0, n elements each (y may be x). V is 4 when x, y and
// mask are aligned to four elements, else 1. The range starts at offset + *shift (shift may be
// null: 0), so that a CUDA graph replay moves it by a value in device memory (storage/random.h).
template <typename T, int V>
__global__ void DropoutTrain(const T* x, T* y, T* mask, int64 n, unsigned long long seed,
                             unsigned long long offset, const unsigned long long* shift, double p,
                             double scale, int req_y, int req_mask) {
  typedef typename Arith<T>::type A;
  const A keep_scale = static_cast<A>(scale);
  if (shift != 0) offset += *shift;
  const int64 blocks = (n + 3) / 4;
  for (int64 b = GlobalThread(); b < blocks; b += GridThreads()) {
    const PhiloxBlock bits = PhiloxBlockAt(seed, offset + static_cast<unsigned long long>(b));
    A keep[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      keep[j] = DropoutKeeps(PhiloxUniform(bits.v[j]), p) ? keep_scale : A(0);
    const int64 i = b * 4;
    if (V == 4 && i + 4 <= n) {
      A v[4];
      LoadN<4>(x + i, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = v[j] * keep[j];
      StoreN<4>(y + i, v, req_y);
      StoreN<4>(mask + i, keep, req_mask);
    } else {
      for (int j = 0; j < 4 && i + j < n; ++j) {
        Store1(y + i + j, ToArith(x[i + j]) * keep[j], req_y);
        Store1(mask + i + j, keep[j], req_mask);
      }
    }
  }
}

}  // namespace weft
