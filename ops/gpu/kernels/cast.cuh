// Cast (ops/tensor/cast.cc): conversion between float32, float64, bfloat16, float16, int32, int64
// and uint8, through double as on the CPU: bfloat16 rounds to nearest even from the float nearest
// the double, float16 from the double directly; integers truncate toward zero, uint8 keeps the low
// byte of the int32 truncation (as x86's conversion does). Adding to the output adds in double,
// then converts once. A value outside the target's range (NaN into an integer, 3e9 into int32) is
// undefined in C++; the GPU saturates where x86 gives INT_MIN.
#pragma once

#include "common.cuh"

namespace weft {

template <typename X>
__device__ inline double CastLoad(X v) {
  return static_cast<double>(ToArith(v));
}

template <typename Y>
__device__ inline Y CastStore(double v) {
  return static_cast<Y>(v);
}
template <>
__device__ inline bf16 CastStore<bf16>(double v) {
  return FromArith<bf16>(static_cast<float>(v));
}
// Straight from double: one rounding.
template <>
__device__ inline f16 CastStore<f16>(double v) {
  f16 h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h.bits) : "d"(v));
  return h;
}
template <>
__device__ inline unsigned char CastStore<unsigned char>(double v) {
  return static_cast<unsigned char>(static_cast<int>(v));
}

// y = cast(x), n elements, in packs of V where the host found both arrays aligned to them.
template <typename X, typename Y, int V>
__global__ void Cast(const X* x, Y* y, int64 n, int req) {
  ForEachPack<V>(n, [&](int64 i, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<X, W> in = *reinterpret_cast<const Pack<X, W>*>(x + i);
    Pack<Y, W> out;
    if (req == kReqAdd) out = *reinterpret_cast<const Pack<Y, W>*>(y + i);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      // Not x + (add ? y : 0): -0 + 0 is +0, and a cast must keep the sign of zero.
      out.v[j] =
          CastStore<Y>(req == kReqAdd ? CastLoad(in.v[j]) + CastLoad(out.v[j]) : CastLoad(in.v[j]));
    }
    *reinterpret_cast<Pack<Y, W>*>(y + i) = out;
  });
}

}  // namespace weft
