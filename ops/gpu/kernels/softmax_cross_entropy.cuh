// SoftmaxCrossEntropy's label lookups (ops/gpu/softmax_cross_entropy.cc), in the array's type T
// (float or double). A label that is not a class index in [0, classes) gives NaN: the GPU cannot
// raise an error without the host waiting for it.
#pragma once

#include "common.cuh"

namespace weft {

// `label` as a class index in [0, classes), or -1 when it is not one.
template <typename T>
__device__ inline int64 ClassOf(T label, int64 classes) {
  const double v = static_cast<double>(label);
  return (v >= 0 && v < static_cast<double>(classes) && v == floor(v)) ? static_cast<int64>(v) : -1;
}

template <typename T>
__device__ inline T NotANumber() { return static_cast<T>(__longlong_as_double(0x7ff8000000000000LL)); }

// loss[i] = -logp[i, label[i]] (added to loss when accumulate); logp (n, classes).
template <typename T>
__global__ void SceLoss(int64 n, int64 classes, const T* logp, const T* label, int accumulate, T* loss) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    const int64 c = ClassOf(label[i], classes);
    const T v = c < 0 ? NotANumber<T>() : -logp[i * classes + c];
    loss[i] = accumulate ? loss[i] + v : v;
  }
}

// dx[i, c] = dy[i] * (p[i, c] - (c == label[i])) (added to dx when accumulate); p (n, classes).
template <typename T>
__global__ void SceGrad(int64 n, int64 classes, const T* dy, const T* p, const T* label, int accumulate, T* dx) {
  for (int64 at = GlobalThread(); at < n * classes; at += GridThreads()) {
    const int64 i = at / classes;
    const int64 c = ClassOf(label[i], classes);
    const T v = c < 0 ? NotANumber<T>() : dy[i] * (p[at] - (at % classes == c ? T(1) : T(0)));
    dx[at] = accumulate ? dx[at] + v : v;
  }
}

}  // namespace weft
