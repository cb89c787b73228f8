// Embedding (ops/nn/embedding.cc): rows of a weight matrix (input_dim, dim) of T (float, double,
// bf16) picked by indices of I (float, double, bf16, int, long long; the fractional part
// dropped), and the weight's gradient, summed with atomic adds in A (T's arithmetic type: float
// for bf16, whose sums go through a float buffer stored at the end by EmbeddingStore).
//
// An index outside [0, input_dim), or NaN, is noted in `bad` (its position), and the op then
// fails, as on the CPU (device_error.cuh); meanwhile it reads a row of zeros (forward) and sends
// its gradient nowhere (backward).
#pragma once

#include "common.cuh"
#include "device_error.cuh"

namespace weft {

// The row that index v picks, or -1 where it is out of range.
template <typename I>
__device__ inline int64 EmbeddingRow(I index, int input_dim) {
  const double v = static_cast<double>(ToArith(index));  // exact for every index type
  return v >= 0 && v < static_cast<double>(input_dim) ? static_cast<int64>(v) : -1;  // NaN: -1
}

// y[k, :] = w[idx[k], :] for the n indices; y: (n, dim). V divides dim.
template <typename T, typename I, int V>
__global__ void EmbeddingForward(const I* idx, const T* w, T* y, int64 n, int64 dim, int input_dim,
                                 int req, GpuErrorSlot bad) {
  typedef typename Arith<T>::type A;
  ForEachPack<V>(n * dim, [&](int64 e, auto width) {
    constexpr int W = decltype(width)::value;
    const int64 row = EmbeddingRow(idx[e / dim], input_dim);
    if (row < 0 && e % dim == 0) NoteBadItem(bad, e / dim);  // once per index: packs start each row
    A v[W];
    if (row >= 0) {
      LoadN<W>(w + row * dim + e % dim, v);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = A(0);
    }
    StoreN<W>(y + e, v, req);
  });
}

// dw[idx[k], :] += dy[k, :] for the n indices; dy: (n, dim). Atomic adds: where an index repeats,
// its rows are summed in no fixed order, so float results may differ in the last bits from run
// to run (the CPU sums them in index order).
template <typename T, typename I>
__global__ void EmbeddingBackward(const T* dy, const I* idx, typename Arith<T>::type* dw, int64 n,
                                  int64 dim, int input_dim, GpuErrorSlot bad) {
  for (int64 e = GlobalThread(); e < n * dim; e += GridThreads()) {
    const int64 row = EmbeddingRow(idx[e / dim], input_dim);
    if (row >= 0) {
      atomicAdd(dw + row * dim + e % dim, ToArith(dy[e]));
    } else if (e % dim == 0) {
      NoteBadItem(bad, e / dim);
    }
  }
}

}  // namespace weft
