// Optimizer updates, as ops/cpu/optimizer.cc computes them, in the array's own type T (float32
// or float64), with the same order of operations so that results match the CPU's.
#pragma once

#include "common.cuh"

namespace weft {

// clip(rescale_grad * grad) + wd * weight.
template <typename T>
__device__ inline T UpdateGradient(const GpuUpdateParams& p, T grad, T weight) {
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
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    Store1(y + i, w[i] - static_cast<T>(p.lr) * UpdateGradient(p, grad[i], w[i]), req);
  }
}

// mom = momentum * mom - lr * g; y = w + mom.
template <typename T>
__global__ void SgdMomUpdate(const T* w, const T* grad, T* mom, T* y, int64 n, GpuUpdateParams p, int req) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const T weight = w[i];
    const T m = static_cast<T>(p.momentum) * mom[i] - static_cast<T>(p.lr) * UpdateGradient(p, grad[i], weight);
    mom[i] = m;
    Store1(y + i, weight + m, req);
  }
}

// m and v updated in place (also when y is not wanted, as on the CPU); y = w - lr * m / (sqrt(v) + eps).
template <typename T>
__global__ void AdamUpdate(const T* w, const T* grad, T* m, T* v, T* y, int64 n, GpuUpdateParams p, int req) {
  const T b1 = static_cast<T>(p.beta1), b2 = static_cast<T>(p.beta2);
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const T weight = w[i];
    const T g = UpdateGradient(p, grad[i], weight);
    const T mi = b1 * m[i] + (1 - b1) * g;
    const T vi = b2 * v[i] + (1 - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    Store1(y + i, weight - static_cast<T>(p.lr) * mi / (Sqrt(vi) + static_cast<T>(p.epsilon)), req);
  }
}

}  // namespace weft
