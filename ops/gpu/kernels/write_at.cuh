// write_at (ops/tensor/write_at.cc): value (outer, k, inner) written into data (outer, n, inner)
// from the offset idx[0] on along the middle axis, the offset stored as float32, float64, int32 or
// int64 (a float's fractional part dropped). An offset outside [0, n - k], or NaN, is noted in
// `bad` and nothing is written; the op then fails, as on the CPU (device_error.cuh).
#pragma once

#include "common.cuh"
#include "device_error.cuh"

namespace weft {

// data[o, idx[0] + j, i] = value[o, j, i].
template <typename T, typename I>
__global__ void WriteAt(const T* value, const I* idx, T* data, int64 outer, int64 n, int64 k,
                        int64 inner, GpuErrorSlot bad) {
  const I v = idx[0];
  const bool fits = v >= I(0) && static_cast<double>(v) <= static_cast<double>(n - k);  // NaN too
  if (!fits) {
    if (GlobalThread() == 0) NoteBadItem(bad, 0);
    return;
  }
  const int64 offset = static_cast<int64>(v);
  for (int64 e = GlobalThread(); e < outer * k * inner; e += GridThreads()) {
    const int64 i = e % inner, j = (e / inner) % k, o = e / (inner * k);
    data[(o * n + offset + j) * inner + i] = value[e];
  }
}

}  // namespace weft
