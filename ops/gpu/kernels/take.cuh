// take (ops/tensor/take.cc): a, viewed as (outer, n, inner) around the axis, gathered by k indices
// stored as float32, float64, int32 or int64 (a float's fractional part dropped), and a's gradient.
//
// An index outside [0, n), or NaN, is noted in `bad` (its position among the indices), and the op
// then fails, as on the CPU (device_error.cuh); meanwhile it reads zeros (forward) and sends its
// gradient nowhere (backward).
#pragma once

#include "common.cuh"
#include "device_error.cuh"

namespace weft {

// The row of a that index v picks, or -1 where it is out of range.
template <typename I>
__device__ inline int64 TakeRow(I v, int64 n) {
  return v >= I(0) && static_cast<double>(v) < static_cast<double>(n) ? static_cast<int64>(v)
                                                                      : -1;  // NaN: -1
}

// y[o, j, i] = a[o, idx[j], i]; y: (outer, k, inner).
template <typename T, typename I>
__global__ void TakeForward(const T* a, const I* idx, T* y, int64 outer, int64 n, int64 k,
                            int64 inner, int req, GpuErrorSlot bad) {
  for (int64 e = GlobalThread(); e < outer * k * inner; e += GridThreads()) {
    const int64 i = e % inner, j = (e / inner) % k, o = e / (inner * k);
    const int64 row = TakeRow(idx[j], n);
    if (row < 0 && i == 0 && o == 0) NoteBadItem(bad, j);  // once per index
    Store1(y + e, row >= 0 ? ToArith(a[(o * n + row) * inner + i]) : typename Arith<T>::type(0),
           req);
  }
}

// da[o, idx[j], i] += dy[o, j, i] (da: float for 16-bit T, internal/scatter_sum.h). Atomic adds:
// where an index repeats, its terms are summed in no fixed order, so float results may differ in
// the last bits from run to run (the CPU sums them in index order).
template <typename T, typename I>
__global__ void TakeBackward(const T* dy, const I* idx, typename Arith<T>::type* da, int64 outer,
                             int64 n, int64 k, int64 inner, GpuErrorSlot bad) {
  for (int64 e = GlobalThread(); e < outer * k * inner; e += GridThreads()) {
    const int64 i = e % inner, j = (e / inner) % k, o = e / (inner * k);
    const int64 row = TakeRow(idx[j], n);
    if (row >= 0) {
      atomicAdd(da + (o * n + row) * inner + i, ToArith(dy[e]));
    } else if (i == 0 && o == 0) {
      NoteBadItem(bad, j);
    }
  }
}

}  // namespace weft
