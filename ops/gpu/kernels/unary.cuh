// The kernels of the elementwise unary ops and their gradients: F is a functor of
// ops/math/unary.h (the CPU loops call the same one), applied in the arithmetic type of T.
#pragma once

#include "common.cuh"
#include "ops/math/unary.h"

namespace weft {

// y = F(x), n elements (in place allowed: y == x); s0, s1: the op's scalars (PointwiseScalars: 0
// where F takes fewer).
template <class F, typename T, int V>
__global__ void UnaryForward(const T* x, T* y, int64 n, double s0, double s1, int req) {
  typedef typename Arith<T>::type A;
  const A s = static_cast<A>(s0), t = static_cast<A>(s1);
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A v[W];
    LoadN<W>(x + i, v);
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = fn::ForwardOf<F>(v[j], s, t);
    StoreN<W>(y + i, v, req);
  });
}

// dx = dy * F'(x), given v: x or y = F(x), as F::kGradReads says (dy itself when Grad reads
// neither), n elements (in place allowed: dx == dy).
template <class F, typename T, int V>
__global__ void UnaryBackward(const T* dy, const T* v, T* dx, int64 n, double s0, double s1,
                              int req) {
  typedef typename Arith<T>::type A;
  const A s = static_cast<A>(s0), t = static_cast<A>(s1);
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A g[W], read[W];
    LoadN<W>(dy + i, g);
    LoadN<W>(v + i, read);  // when v is dy, the lines just read
#pragma unroll
    for (int j = 0; j < W; ++j) g[j] = fn::BackwardOf<F>(g[j], read[j], s, t);
    StoreN<W>(dx + i, g, req);
  });
}

}  // namespace weft
