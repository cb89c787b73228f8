// The window of one pooling output along one axis, for the CPU's loops (ops/cpu/pooling.cc) and
// the GPU's kernels (ops/gpu/kernels/pooling.cuh) alike: which input positions it covers, and how
// many positions an average divides by. Pooling's definition (ops/nn/pooling.cc) states the rule;
// this is its one implementation. Device neutral (ops/math/base.h says what that asks).
//
//   const pool::Axis rows{h, kernel_h, stride_h, pad_h};
//   const pool::Span r = pool::Inside(rows, oh);                  // input rows [r.begin, r.end)
//   const long long divisor = pool::Count(rows, oh, true) * pool::Count(cols, ow, true);
#pragma once

#include "core/host_device.h"

namespace weft::pool {

// One axis of a call: the input's extent, and the window's kernel, stride and leading padding.
struct Axis {
  long long size, kernel, stride, pad;
};

// Input positions [begin, end).
struct Span {
  long long begin, end;
};

// The input positions under the window of output o: it starts at o * stride - pad.
WEFT_HOST_DEVICE inline Span Inside(const Axis& a, long long o) {
  const long long start = o * a.stride - a.pad, stop = start + a.kernel;
  return {start > 0 ? start : 0, stop < a.size ? stop : a.size};
}

// The positions an average divides by along the axis. include_pad (count_include_pad): the window
// clipped to the padded input [-pad, size + pad), i.e. padding counts but the part of a ceil-mode
// window past the padding does not (PyTorch's and MXNet's rule); else the positions inside the
// input.
WEFT_HOST_DEVICE inline long long Count(const Axis& a, long long o, bool include_pad) {
  if (!include_pad) {
    const Span s = Inside(a, o);
    return s.end - s.begin;
  }
  const long long start = o * a.stride - a.pad, stop = start + a.kernel, limit = a.size + a.pad;
  return (stop < limit ? stop : limit) - start;
}

}  // namespace weft::pool
