// Convolution's bias (ops/gpu/convolution.cc), around cuDNN's convolutions: the forward starts y
// from the bias and lets the convolution add to it (so a bf16 output is rounded once), and the
// backward sums out_grad over all but the channel axis, on NCHW data of (n, channels, plane)
// elements (channels last, ops/gpu/convolution.cc sums the rows). T: float, double or bf16 (float
// arithmetic).
#pragma once

#include "common.cuh"
#include "ops/math/unary.h"

namespace weft {

// y[at] = b[c] (plus what y held, when req is add) for each of y's `size` elements, whose channel
// c is at / step % channels: step the plane for NCHW, 1 for NHWC.
template <typename T>
__global__ void ChannelBias(const T* b, T* y, int64 size, int64 channels, int64 step, int req) {
  for (int64 at = GlobalThread(); at < size; at += GridThreads())
    Store1(y + at, ToArith(b[at / step % channels]), req);
}

// y[at] = F(y[at] + b[c]) in place for each of y's `n` elements (c as ChannelBias's): a float32
// or float64 convolution's bias and activation epilogue in one pass after the convolution wrote
// y (F: a functor of ops/math/unary.h, Identity for a bias alone). Packs of V elements share a
// channel (step a multiple of V) or hold consecutive ones (step 1).
template <class F, typename T, int V>
__global__ void ChannelBiasAct(const T* b, T* y, int64 n, int64 channels, int64 step) {
  typedef typename Arith<T>::type A;
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A v[W];
    LoadN<W>(y + i, v);
    int64 c = i / step % channels;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      v[j] = fn::ForwardOf<F>(v[j] + ToArith(b[c]), A(0), A(0));
      if (step == 1 && ++c == channels) c = 0;
    }
    StoreN<W>(y + i, v, kReqWrite);
  });
}

// db[c] = the sum of dy[i, c, p] over i and p, per req: a block per channel, its threads over the
// (n, plane) elements, then BlockSum.
template <typename T>
__global__ void ChannelSums(const T* dy, T* db, int64 n, int64 channels, int64 plane, int req) {
  typedef typename Arith<T>::type A;
  __shared__ A partial[kGpuBlock];
  for (int64 c = blockIdx.x; c < channels; c += gridDim.x) {
    A sum = A(0);
    for (int64 e = threadIdx.x; e < n * plane; e += blockDim.x)
      sum += ToArith(dy[(e / plane * channels + c) * plane + e % plane]);
    const A total = BlockSum(sum, partial);
    if (threadIdx.x == 0) Store1(db + c, total, req);
    __syncthreads();  // partial[0] is read before the next channel overwrites it
  }
}

}  // namespace weft
