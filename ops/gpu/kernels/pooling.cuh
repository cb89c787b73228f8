// Pooling (ops/nn/pooling.cc) for the calls cuDNN cannot express: those whose last window reaches
// past the padding (ceil mode), as ops/gpu/pooling.cc says. The windows are pool_window.h's, as
// on the CPU; max pooling's gradient goes to the first largest input of each window, as in the
// CPU's loops. T: float, double or bf16 (whose arithmetic is float: Arith<T>). The images lie as
// NCHW or NHWC (GpuPool2d::channels): a plane's element at offset `at` of its (h, w) or (oh, ow)
// positions lies at PlaneStart + at * channels.
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

// Where plane q of `size` positions starts: planes of n images of `channels` interleaved
// channels each.
__device__ inline int64 PlaneStart(const GpuPool2d& p, int64 q, int64 size) {
  return q / p.channels * size * p.channels + q % p.channels;
}

// The plane and the position in it of the element at `at` of an image tensor of `size`
// positions a plane (memory order, so neighbouring threads touch neighbouring elements).
struct PlaneAt {
  int64 plane, at;
};
__device__ inline PlaneAt PlaneOf(const GpuPool2d& p, int64 i, int64 size) {
  const int64 c = i % p.channels, rest = i / p.channels;
  return {rest / size * p.channels + c, rest % size};
}

// What the average of the window at output (oh, ow) divides by.
template <typename A>
__device__ inline A AvgDivisor(const GpuPool2d& p, int64 oh, int64 ow) {
  const bool include = p.include_pad != 0;
  return static_cast<A>(pool::Count(PoolRows(p), oh, include) *
                        pool::Count(PoolCols(p), ow, include));
}

// The pooled value of the window at output (oh, ow) of the plane starting at xp; for max, *best
// is the offset in the plane (row * w + col) of its first largest input.
template <typename T, typename A = typename Arith<T>::type>
__device__ inline A PoolWindow(const GpuPool2d& p, const T* xp, int64 oh, int64 ow, int64* best) {
  const pool::Span r = pool::Inside(PoolRows(p), oh), c = pool::Inside(PoolCols(p), ow);
  A acc = A(0);  // max: replaced by the first input (every window covers one)
  *best = -1;
  for (int64 row = r.begin; row < r.end; ++row) {
    for (int64 col = c.begin; col < c.end; ++col) {
      const A v = ToArith(xp[(row * p.w + col) * p.channels]);
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
  const int64 in = p.h * p.w, out = p.oh * p.ow;
  for (int64 o = GlobalThread(); o < p.planes * out; o += GridThreads()) {
    const PlaneAt q = PlaneOf(p, o, out);
    int64 best;
    Store1(y + o, PoolWindow(p, x + PlaneStart(p, q.plane, in), q.at / p.ow, q.at % p.ow, &best),
           req);
  }
}

// The outputs whose windows cover input position `at` along an axis of `out` outputs.
__device__ inline pool::Span Covering(const pool::Axis& a, int64 at, int64 out) {
  const int64 low = at + a.pad - a.kernel + 1, high = (at + a.pad) / a.stride + 1;
  return {low > 0 ? (low + a.stride - 1) / a.stride : 0, high < out ? high : out};
}

// For max pooling's backward: the offset in its plane of each window's first largest input
// (PoolWindow's *best), laid out as y, so that the backward reads one index where it would scan a
// window (a 3x3 window of stride 2 covers an input up to 4 times: 36 reads of x become 4).
template <typename T>
__global__ void PoolArgmax(const T* x, int* best, GpuPool2d p) {
  const int64 in = p.h * p.w, out = p.oh * p.ow;
  for (int64 o = GlobalThread(); o < p.planes * out; o += GridThreads()) {
    const PlaneAt q = PlaneOf(p, o, out);
    int64 b;
    PoolWindow(p, x + PlaneStart(p, q.plane, in), q.at / p.ow, q.at % p.ow, &b);
    best[o] = static_cast<int>(b);
  }
}

// dx (planes, h, w) from dy (planes, oh, ow) and x, per req: each input gathers the gradient of
// the windows that cover it (no atomics: one thread writes each element). Max pooling reads each
// window's largest input from `best` (PoolArgmax's), or finds it again where `best` is null.
template <typename T>
__global__ void PoolBackward(const T* dy, const T* x, const int* best, T* dx, GpuPool2d p,
                             int req) {
  typedef typename Arith<T>::type A;
  const int64 in = p.h * p.w, out = p.oh * p.ow;
  for (int64 i = GlobalThread(); i < p.planes * in; i += GridThreads()) {
    const PlaneAt q = PlaneOf(p, i, in);
    const int64 at = q.at;
    const pool::Span r = Covering(PoolRows(p), at / p.w, p.oh);
    const pool::Span c = Covering(PoolCols(p), at % p.w, p.ow);
    const T* xp = x + PlaneStart(p, q.plane, in);
    const int64 plane_out = PlaneStart(p, q.plane, out);
    A sum = A(0);
    for (int64 oh = r.begin; oh < r.end; ++oh) {
      for (int64 ow = c.begin; ow < c.end; ++ow) {
        const int64 o = plane_out + (oh * p.ow + ow) * p.channels;
        const A g = ToArith(dy[o]);
        if (!p.max) {
          sum += g / AvgDivisor<A>(p, oh, ow);
          continue;
        }
        int64 largest;
        if (best != nullptr) {
          largest = best[o];
        } else {
          PoolWindow(p, xp, oh, ow, &largest);
        }
        if (largest == at) sum += g;
      }
    }
    Store1(dx + i, sum, req);
  }
}

}  // namespace weft
