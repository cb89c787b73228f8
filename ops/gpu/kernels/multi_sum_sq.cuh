// multi_sum_sq (ops/gpu/multi_sum_sq.cc): the sums of squares of up to kGpuMaxSumSq arrays of T
// per launch. MultiSumSqChunks: a block per chunk of kGpuSumSqChunk elements of one array (16-byte
// packs where the array starts on 16 bytes), its threads' sums met by BlockSum into partials[c];
// MultiSumSqFinish: a thread per array adds its chunks' partials in order. Accumulated in the
// arithmetic type (float for bf16); the cut depends on the sizes alone, so the bits do too.
#pragma once

#include "common.cuh"

namespace weft {

template <typename T>
__global__ void MultiSumSqChunks(GpuSumSqArgs a, typename Arith<T>::type* partials) {
  typedef typename Arith<T>::type A;
  constexpr int V = 16 / sizeof(T);
  __shared__ A shared[kGpuBlock];
  for (int64 c = blockIdx.x; c < a.first_chunk[a.count]; c += gridDim.x) {
    int k = 0;
    while (c >= a.first_chunk[k + 1]) ++k;  // the same k for the whole block
    const T* x = static_cast<const T*>(a.in[k]);
    const int64 begin = (c - a.first_chunk[k]) * kGpuSumSqChunk;
    const int64 end = begin + kGpuSumSqChunk < a.size[k] ? begin + kGpuSumSqChunk : a.size[k];
    A sum = 0;
    int64 i = begin;
    if (reinterpret_cast<unsigned long long>(x) % 16 == 0) {  // begin is a whole number of packs
      for (int64 p = begin + threadIdx.x * V; p + V <= end; p += kGpuBlock * V) {
        A v[V];
        LoadN<V>(x + p, v);
#pragma unroll
        for (int e = 0; e < V; ++e) sum += v[e] * v[e];
      }
      i = begin + (end - begin) / V * V;
    }
    for (int64 e = i + threadIdx.x; e < end; e += kGpuBlock) {
      const A v = ToArith(x[e]);
      sum += v * v;
    }
    sum = BlockSum(sum, shared);
    if (threadIdx.x == 0) partials[c] = sum;
    __syncthreads();  // shared is read before the next chunk's BlockSum writes it
  }
}

template <typename T>
__global__ void MultiSumSqFinish(GpuSumSqArgs a, const typename Arith<T>::type* partials, T* out,
                                 int req) {
  typedef typename Arith<T>::type A;
  for (int64 k = GlobalThread(); k < a.count; k += GridThreads()) {
    A sum = 0;
    for (int64 c = a.first_chunk[k]; c < a.first_chunk[k + 1]; ++c) sum += partials[c];
    Store1(out + k, sum, req);
  }
}

}  // namespace weft
