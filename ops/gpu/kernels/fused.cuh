// What the kernels generated for fused groups (ops/gpu/fusion/codegen.h) share: the grid-stride
// loop over packs in the index type the host chose (int when every index fits, else long long),
// and the store of a cast that adds to its output (in double, as kernels/cast.cuh adds). The rest
// comes from common.cuh (loads, stores, bfloat16), cast.cuh and the functors of ops/math.
#pragma once

#include "cast.cuh"
#include "common.cuh"
#include "ops/math/binary.h"
#include "ops/math/ternary.h"
#include "ops/math/unary.h"

namespace weft {

// Calls f(i, Width<V>()) for the packs [i, i + V) of [0, n), then f(i, Width<1>()) for the
// elements after the last whole pack, spread over the grid. The host keeps n plus the grid's
// threads within I's range, so no index below overflows.
template <int V, typename I, typename F>
__device__ __forceinline__ void ForEachPackOf(I n, F f) {
  const I threads = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  const I first =
      static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const I packs = n / V;
  for (I p = first; p < packs; p += threads) f(p * V, Width<V>());
  if (V > 1) {
    for (I i = packs * V + first; i < n; i += threads) f(i, Width<1>());
  }
}

// y += cast(x) for N consecutive elements at p, given x converted to double: the sum in double,
// converted once, as the unfused Cast adds (kernels/cast.cuh).
template <int N, typename Y>
__device__ __forceinline__ void StoreCastAddN(Y* p, const double (&x)[N]) {
  Pack<Y, N> pack = *reinterpret_cast<const Pack<Y, N>*>(p);
#pragma unroll
  for (int j = 0; j < N; ++j) pack.v[j] = CastStore<Y>(x[j] + CastLoad(pack.v[j]));
  *reinterpret_cast<Pack<Y, N>*>(p) = pack;
}

}  // namespace weft
