// The kernels of the elementwise binary ops with broadcasting and their gradients: F is a functor
// of ops/math/binary.h (the CPU loops call the same one), applied in the arithmetic type of T.
// And add_n.
//
// Broadcasting is described by GpuAxes (params.cuh) that the host builds with the axes merged
// wherever the three arrays are contiguous across them. A gradient is reduced over the axes its
// operand was broadcast along: `kept` walks the operand's own elements (in its row-major order),
// `reduced` walks the output positions that each of them receives from. Sums start from -0, the
// identity of IEEE addition, as on the CPU (a sum of one term is that term, -0 included).
#pragma once

#include "common.cuh"
#include "ops/math/binary.h"

namespace weft {

// y = F(l, r); all three of n elements (y may be l or r).
template <class F, typename T, int V>
__global__ void BinaryForward(const T* l, const T* r, T* y, int64 n, int req) {
  typedef typename Arith<T>::type A;
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A a[W], b[W];
    LoadN<W>(l + i, a);
    LoadN<W>(r + i, b);
#pragma unroll
    for (int j = 0; j < W; ++j) a[j] = F::Fwd(a[j], b[j]);
    StoreN<W>(y + i, a, req);
  });
}

// y = F(l, r) with broadcasting; y has n elements, walked by `axes`.
template <class F, typename T>
__global__ void BinaryBroadcast(const T* l, const T* r, T* y, GpuAxes axes, int64 n, int req) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    int64 off[3] = {0, 0, 0};
    AddOffsets(axes, i, off);
    Store1(y + i, F::Fwd(ToArith(l[off[1]]), ToArith(r[off[2]])), req);
  }
}

// dl = dy * DL(l, r), dr = dy * DR(l, r); all five of n elements (no broadcasting).
template <class F, typename T, int V>
__global__ void BinaryBackward(const T* dy, const T* l, const T* r, T* dl, T* dr, int64 n,
                               int req_l, int req_r) {
  typedef typename Arith<T>::type A;
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A g[W], a[W], b[W], ga[W], gb[W];
    LoadN<W>(dy + i, g);
    LoadN<W>(l + i, a);
    LoadN<W>(r + i, b);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      ga[j] = g[j] * F::template DL<A>(a[j], b[j]);
      gb[j] = g[j] * F::template DR<A>(a[j], b[j]);
    }
    StoreN<W>(dl + i, ga, req_l);
    StoreN<W>(dr + i, gb, req_r);
  });
}

// One term of a broadcast gradient: dy * D(l, r) at position k of `reduced` from `base`.
template <class F, int kSide, typename T>
__device__ inline typename Arith<T>::type GradTerm(const T* dy, const T* l, const T* r,
                                                   const GpuAxes& reduced, const int64 (&base)[3],
                                                   int64 k) {
  typedef typename Arith<T>::type A;
  int64 off[3] = {base[0], base[1], base[2]};
  AddOffsets(reduced, k, off);
  const A a = ToArith(l[off[1]]), b = ToArith(r[off[2]]);
  return ToArith(dy[off[0]]) * (kSide == 0 ? F::template DL<A>(a, b) : F::template DR<A>(a, b));
}

// The gradient of operand kSide (0: lhs, 1: rhs), n_out elements, each the sum of n_reduced
// terms. One thread per element: for many elements (then neighbours read neighbours).
template <class F, int kSide, typename T>
__global__ void BinaryGradPerThread(const T* dy, const T* l, const T* r, T* out, GpuAxes kept,
                                    GpuAxes reduced, int64 n_out, int64 n_reduced, int req) {
  typedef typename Arith<T>::type A;
  for (int64 j = GlobalThread(); j < n_out; j += GridThreads()) {
    int64 base[3] = {0, 0, 0};
    AddOffsets(kept, j, base);
    A sum = A(-0.0);
    for (int64 k = 0; k < n_reduced; ++k) sum += GradTerm<F, kSide>(dy, l, r, reduced, base, k);
    Store1(out + j, sum, req);
  }
}

// The same with one block per element: for few elements with long sums.
template <class F, int kSide, typename T>
__global__ void BinaryGradPerBlock(const T* dy, const T* l, const T* r, T* out, GpuAxes kept,
                                   GpuAxes reduced, int64 n_out, int64 n_reduced, int req) {
  typedef typename Arith<T>::type A;
  __shared__ A partial[kGpuBlock];
  for (int64 j = blockIdx.x; j < n_out; j += gridDim.x) {
    int64 base[3] = {0, 0, 0};
    AddOffsets(kept, j, base);
    A sum = A(-0.0);
    for (int64 k = threadIdx.x; k < n_reduced; k += blockDim.x)
      sum += GradTerm<F, kSide>(dy, l, r, reduced, base, k);
    const A total = BlockSum(sum, partial);
    if (threadIdx.x == 0) Store1(out + j, total, req);
    __syncthreads();  // partial[0] is read before the next element overwrites it
  }
}

// y = the sum of args.count arrays of n elements, in order, from -0 (y may be args.in[0]).
template <typename T, int V>
__global__ void AddN(GpuAddNArgs args, T* y, int64 n, int req) {
  typedef typename Arith<T>::type A;
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A sum[W], x[W];
#pragma unroll
    for (int j = 0; j < W; ++j) sum[j] = A(-0.0);
    for (int k = 0; k < args.count; ++k) {
      LoadN<W>(static_cast<const T*>(args.in[k]) + i, x);
#pragma unroll
      for (int j = 0; j < W; ++j) sum[j] += x[j];
    }
    StoreN<W>(y + i, sum, req);
  });
}

}  // namespace weft
