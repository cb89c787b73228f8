// Pooling (ops/nn/pooling.cc) for the calls cuDNN cannot express: those whose last window reaches
// past the padding (ceil mode), as ops/gpu/pooling.cc says. The windows are pool_window.h's, as
// on the CPU; max pooling's gradient goes to the first largest input of each window, as in the
// CPU's loops. T: float, double or bf16 (whose arithmetic is float: Arith<T>).
#pragma once

#include "common.cuh"
#include "ops/math/pool_window.h"

namespace weft {

__device__ inline pool::Axis PoolRows(const GpuPool2d& p) {
  return {p.h, p.kernel[0], p.stride[0], p.pad[0]};
}
__device__ inline pool::Axis PoolCols(const GpuPool2d& p) {
  return {p.w, p.kernel[1], p.stride[1], p.pad[1]};
}

// What the average of the window at output (oh, ow) divides by.
template <typename A>
__device__ inline A AvgDivisor(const GpuPool2d& p, int64 oh, int64 ow) {
  const bool include = p.include_pad != 0;
  return static_cast<A>(pool::Count(PoolRows(p), oh, include) *
                        pool::Count(PoolCols(p), ow, include));
}

// The pooled value of the window at output (oh, ow) of the plane xp; for max, *best is the offset
// in the plane of its first largest input.
template <typename T, typename A = typename Arith<T>::type>
__device__ inline A PoolWindow(const GpuPool2d& p, const T* xp, int64 oh, int64 ow, int64* best) {
  const pool::Span r = pool::Inside(PoolRows(p), oh), c = pool::Inside(PoolCols(p), ow);
  A acc = A(0);  // max: replaced by the first input (every window covers one)
  *best = -1;
  for (int64 row = r.begin; row < r.end; ++row) {
    for (int64 col = c.begin; col < c.end; ++col) {
      const A v = ToArith(xp[row * p.w + col]);
      if (!p.max) {
        acc += v;
      } else if (*best < 0 || v > acc) {
        acc = v, *best = row * p.w + col;
      }
    }
  }
  return p.max ? acc : acc / AvgDivisor<A>(p, oh, ow);
}

// y (planes, oh, ow) from x (planes, h, w), per req.
template <typename T>
__global__ void PoolForward(const T* x, T* y, GpuPool2d p, int req) {
  for (int64 o = GlobalThread(); o < p.planes * p.oh * p.ow; o += GridThreads()) {
    const int64 plane = o / (p.oh * p.ow), oh = o / p.ow % p.oh, ow = o % p.ow;
    int64 best;
    Store1(y + o, PoolWindow(p, x + plane * p.h * p.w, oh, ow, &best), req);
  }
}

// The outputs whose windows cover input position `at` along an axis of `out` outputs.
__device__ inline pool::Span Covering(const pool::Axis& a, int64 at, int64 out) {
  const int64 low = at + a.pad - a.kernel + 1, high = (at + a.pad) / a.stride + 1;
  return {low > 0 ? (low + a.stride - 1) / a.stride : 0, high < out ? high : out};
}

// dx (planes, h, w) from dy (planes, oh, ow) and x, per req: each input gathers the gradient of
// the windows that cover it (no atomics: one thread writes each element).
template <typename T>
__global__ void PoolBackward(const T* dy, const T* x, T* dx, GpuPool2d p, int req) {
  typedef typename Arith<T>::type A;
  for (int64 i = GlobalThread(); i < p.planes * p.h * p.w; i += GridThreads()) {
    const int64 plane = i / (p.h * p.w), at = i % (p.h * p.w);
    const pool::Span r = Covering(PoolRows(p), at / p.w, p.oh);
    const pool::Span c = Covering(PoolCols(p), at % p.w, p.ow);
    const T* xp = x + plane * p.h * p.w;
    const T* dyp = dy + plane * p.oh * p.ow;
    A sum = A(0);
    for (int64 oh = r.begin; oh < r.end; ++oh) {
      for (int64 ow = c.begin; ow < c.end; ++ow) {
        const A g = ToArith(dyp[oh * p.ow + ow]);
        if (!p.max) {
          sum += g / AvgDivisor<A>(p, oh, ow);
          continue;
        }
        int64 best;
        PoolWindow(p, xp, oh, ow, &best);
        if (best == at) sum += g;
      }
    }
    Store1(dx + i, sum, req);
  }
}

}  // namespace weft
