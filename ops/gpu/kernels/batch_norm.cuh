// What BatchNorm's GPU compute (ops/gpu/batch_norm.cc) adds to cuDNN's batch normalization: the
// saved invstd of a forward that normalizes with the moving statistics, and the data gradient of
// such a forward (statistics constant). T: the data's type (float, double, weft::bf16); S: the
// statistics' (float, or double for double data).
#pragma once

#include "common.cuh"

namespace weft {

// invstd[i] = 1 / sqrt(var[i] + eps), i < c.
template <typename S>
__global__ void BnInvStd(const S* var, S* invstd, int64 c, double eps) {
  for (int64 i = GlobalThread(); i < c; i += GridThreads())
    invstd[i] = S(1) / Sqrt(var[i] + static_cast<S>(eps));
}

// dx = dy * gamma[ch] * invstd[ch] (gamma null: 1) over data seen as (outer, c, inner), as `req`
// says; ch = (i / inner) % c.
template <typename T, typename S>
__global__ void BnConstantStatsGrad(const T* dy, const S* gamma, const S* invstd, T* dx, int64 n,
                                    int64 c, int64 inner, int req) {
  typedef typename Arith<T>::type A;
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const int64 ch = (i / inner) % c;
    const A scale = static_cast<A>((gamma ? gamma[ch] : S(1)) * invstd[ch]);
    Store1(dx + i, ToArith(dy[i]) * scale, req);
  }
}

}  // namespace weft
