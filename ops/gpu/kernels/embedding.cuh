// Embedding (ops/nn/embedding.cc): rows of a weight matrix (input_dim, dim) picked by indices
// stored as float32 or float64 (the fractional part dropped), and the weight's gradient.
//
// An index outside [0, input_dim), or NaN, is noted in `bad` (its position), and the op then
// fails, as on the CPU (device_error.cuh); meanwhile it reads a row of zeros (forward) and sends
// its gradient nowhere (backward).
#pragma once

#include "common.cuh"
#include "device_error.cuh"

namespace weft {

// The row that index v picks, or -1 where it is out of range.
template <typename T>
__device__ inline int64 EmbeddingRow(T v, int input_dim) {
  return v >= T(0) && v < static_cast<T>(input_dim) ? static_cast<int64>(v) : -1;  // NaN: -1
}

// y[k, :] = w[idx[k], :] for the n indices; y: (n, dim). V divides dim.
template <typename T, int V>
__global__ void EmbeddingForward(const T* idx, const T* w, T* y, int64 n, int64 dim, int input_dim,
                                 int req, GpuErrorSlot bad) {
  ForEachPack<V>(n * dim, [&](int64 e, auto width) {
    constexpr int W = decltype(width)::value;
    const int64 row = EmbeddingRow(idx[e / dim], input_dim);
    if (row < 0 && e % dim == 0) NoteBadItem(bad, e / dim);  // once per index: packs start each row
    T v[W];
    if (row >= 0) {
      LoadN<W>(w + row * dim + e % dim, v);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = T(0);
    }
    StoreN<W>(y + e, v, req);
  });
}

// dw[idx[k], :] += dy[k, :] for the n indices; dy: (n, dim). Atomic adds: where an index repeats,
// its rows are summed in no fixed order, so float results may differ in the last bits from run
// to run (the CPU sums them in index order).
template <typename T>
__global__ void EmbeddingBackward(const T* dy, const T* idx, T* dw, int64 n, int64 dim,
                                  int input_dim, GpuErrorSlot bad) {
  for (int64 e = GlobalThread(); e < n * dim; e += GridThreads()) {
    const int64 row = EmbeddingRow(idx[e / dim], input_dim);
    if (row >= 0) {
      atomicAdd(dw + row * dim + e % dim, dy[e]);
    } else if (e % dim == 0) {
      NoteBadItem(bad, e / dim);
    }
  }
}

}  // namespace weft
