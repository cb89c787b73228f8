// Filling an array with a value (zeros_like, ones_like, Dropout's mask outside training).
#pragma once

#include "common.cuh"

namespace weft {

// y = value (or y += value), n elements.
template <typename T, int V>
__global__ void Fill(T* y, int64 n, double value, int req) {
  typedef typename Arith<T>::type A;
  const A v = static_cast<A>(value);
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A values[W];
#pragma unroll
    for (int j = 0; j < W; ++j) values[j] = v;
    StoreN<W>(y + i, values, req);
  });
}

}  // namespace weft
