// Optimizer updates, as ops/cpu/optimizer.cc computes them, in the array's arithmetic type
// (float32, float64; float for bf16 weights and state), with the same order of operations so that
// results match the CPU's.
#pragma once

#include "common.cuh"

namespace weft {

// clip(rescale_grad * grad) + wd * weight.
template <typename T>
__device__ inline T UpdateGradient(const GpuUpdateParams& p, T grad, T weight) {  // T: arithmetic type
  T g = static_cast<T>(p.rescale_grad) * grad;
  if (p.clip_gradient > 0) {
    const T c = static_cast<T>(p.clip_gradient);
    g = g > c ? c : (g < -c ? -c : g);
  }
  return g + static_cast<T>(p.wd) * weight;
}

// y = w - lr * g; n elements (y may be w).
template <typename T>
__global__ void SgdUpdate(const T* w, const T* grad, T* y, int64 n, GpuUpdateParams p, int req) {
  typedef typename Arith<T>::type A;
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const A weight = ToArith(w[i]);
    Store1(y + i, weight - static_cast<A>(p.lr) * UpdateGradient<A>(p, ToArith(grad[i]), weight), req);
  }
}

// mom = momentum * mom - lr * g; y = w + mom.
template <typename T>
__global__ void SgdMomUpdate(const T* w, const T* grad, T* mom, T* y, int64 n, GpuUpdateParams p, int req) {
  typedef typename Arith<T>::type A;
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const A weight = ToArith(w[i]);
    const A m = static_cast<A>(p.momentum) * ToArith(mom[i]) - static_cast<A>(p.lr) * UpdateGradient<A>(p, ToArith(grad[i]), weight);
    mom[i] = FromArith<T>(m);
    Store1(y + i, weight + m, req);
  }
}

// m and v updated in place (also when y is not wanted, as on the CPU); y = w - lr * m / (sqrt(v) + eps).
template <typename T>
__global__ void AdamUpdate(const T* w, const T* grad, T* m, T* v, T* y, int64 n, GpuUpdateParams p, int req) {
  typedef typename Arith<T>::type A;
  const A b1 = static_cast<A>(p.beta1), b2 = static_cast<A>(p.beta2);
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const A weight = ToArith(w[i]);
    const A g = UpdateGradient<A>(p, ToArith(grad[i]), weight);
    const A mi = b1 * ToArith(m[i]) + (1 - b1) * g;
    const A vi = b2 * ToArith(v[i]) + (1 - b2) * g * g;
    m[i] = FromArith<T>(mi);
    v[i] = FromArith<T>(vi);
    Store1(y + i, weight - static_cast<A>(p.lr) * mi / (Sqrt(vi) + static_cast<A>(p.epsilon)), req);
  }
}

}  // namespace weft
