// What every kernel of ops/gpu/kernels shares: the bfloat16 and float16 storage types, the
// arithmetic type of each stored type, math functions by type, loads and stores of packs of
// elements (16 bytes at a time where the host found every pointer aligned), output requests, and
// the grid-stride loop. NVRTC only: no host code and no system headers.
#pragma once

#include "ops/math/base.h"
#include "params.cuh"

namespace weft {

typedef long long int64;

// bfloat16, stored as its bits; arithmetic is done in float.
struct bf16 {
  unsigned short bits;
};

// float16 (IEEE binary16), stored as its bits; arithmetic is done in float, and the conversions
// are the hardware's (cvt: exact widening, rounding to nearest even).
struct f16 {
  unsigned short bits;
};

template <typename T>
struct Arith {
  typedef T type;
};
template <>
struct Arith<bf16> {
  typedef float type;
};
template <>
struct Arith<f16> {
  typedef float type;
};

template <typename T>
__device__ inline T ToArith(T x) {
  return x;
}
__device__ inline float ToArith(bf16 x) {
  return __uint_as_float(static_cast<unsigned int>(x.bits) << 16);
}
__device__ inline float ToArith(f16 x) {
  float v;
  asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(x.bits));
  return v;
}

template <typename T>
__device__ inline T FromArith(typename Arith<T>::type v) {
  return v;
}
// Round to nearest, ties to even; NaN stays a (quiet) NaN.
template <>
__device__ inline bf16 FromArith<bf16>(float v) {
  const unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<unsigned short>((u >> 16) | 0x40u)};
  return bf16{static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// Round to nearest, ties to even; out of range: infinity; NaN stays a NaN.
template <>
__device__ inline f16 FromArith<f16>(float v) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
  return h;
}

// Math functions by type, as the host's ops call them (ops/math/base.h).
using math::Exp;
using math::Fabs;
using math::Log;
using math::Log1p;
using math::Sqrt;
using math::Tanh;

// A kernel's dynamic shared memory (its launch's shared_bytes) as an array of T named `name`
// (tests/kernel_host_shim.h gives the host a static one).
#ifndef WEFT_DYNAMIC_SHARED
#define WEFT_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// N consecutive elements from p (aligned to the pack when N > 1), in the arithmetic type.
template <int N, typename T>
__device__ inline void LoadN(const T* p, typename Arith<T>::type (&out)[N]) {
  const Pack<T, N> pack = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = ToArith(pack.v[j]);
}

// Stores v into N consecutive elements at p as `req` says.
template <int N, typename T>
__device__ inline void StoreN(T* p, const typename Arith<T>::type (&v)[N], int req) {
  if (req == kReqNull) return;
  Pack<T, N> pack;
  if (req == kReqAdd) pack = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j)
    pack.v[j] = FromArith<T>(req == kReqAdd ? ToArith(pack.v[j]) + v[j] : v[j]);
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

template <typename T>
__device__ inline void Store1(T* p, typename Arith<T>::type v, int req) {
  const typename Arith<T>::type one[1] = {v};
  StoreN<1>(p, one, req);
}

template <int N>
struct Width {
  static constexpr int value = N;
};

__device__ inline int64 GlobalThread() {
  return static_cast<int64>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64 GridThreads() { return static_cast<int64>(gridDim.x) * blockDim.x; }

// Calls f(i, Width<V>()) for the packs [i, i + V) of [0, n), then f(i, Width<1>()) for the
// elements after the last whole pack, spread over the grid.
template <int V, typename F>
__device__ inline void ForEachPack(int64 n, F f) {
  const int64 packs = n / V;
  for (int64 p = GlobalThread(); p < packs; p += GridThreads()) f(p * V, Width<V>());
  if (V > 1) {
    for (int64 i = packs * V + GlobalThread(); i < n; i += GridThreads()) f(i, Width<1>());
  }
}

// The sum of every thread's `value` over a block of kGpuBlock threads, by a tree in `partial`
// (shared memory of kGpuBlock elements); every thread of the block calls it and gets the sum.
// The caller synchronizes again before `partial` is reused.
template <typename A>
__device__ inline A BlockSum(A value, A* partial) {
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int half = kGpuBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  return partial[0];
}

// The sum of `value` over the 32 lanes of a warp, by butterfly shuffles: every lane gets the same
// bits (each adds the same pairs in the same order).
template <typename A>
__device__ inline A WarpSum(A value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Adds to off[a] the offset in array a of the element at row-major position `linear` of `axes`.
__device__ inline void AddOffsets(const GpuAxes& axes, int64 linear, int64 (&off)[3]) {
  for (int d = axes.ndim - 1; d >= 0; --d) {
    const int64 c = d == 0 ? linear : linear % axes.dim[d];
    linear = d == 0 ? 0 : linear / axes.dim[d];
#pragma unroll
    for (int a = 0; a < 3; ++a) off[a] += c * axes.stride[a][d];
  }
}

}  // namespace weft
