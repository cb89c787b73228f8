// The kernels of where (ops/elementwise/where.cc) and its gradient: the functor of
// ops/math/ternary.h (the CPU loops call the same one), applied in the arithmetic type of T.
//
// Broadcasting is described by GpuAxes (params.cuh) that the host builds with the axes merged
// wherever the arrays are contiguous across them. Forward walks the output in row-major order
// with the strides of condition (0), a (1) and b (2). A gradient is reduced over the axes its
// operand was broadcast along: `kept` walks the operand's own elements (in its row-major order),
// `reduced` the output positions each receives from, with the strides of dy (0) and condition
// (1). Sums start from -0 and run in row-major order, as on the CPU.
#pragma once

#include "common.cuh"
#include "ops/math/ternary.h"

namespace weft {

// y = Where(c, a, b); y has n elements, walked by `axes`.
template <typename T>
__global__ void WhereForward(const T* c, const T* a, const T* b, T* y, GpuAxes axes, int64 n,
                             int req) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    int64 off[3] = {0, 0, 0};
    AddOffsets(axes, i, off);
    Store1(y + i, fn::Where::Fwd(ToArith(c[off[0]]), ToArith(a[off[1]]), ToArith(b[off[2]])), req);
  }
}

// g = the gradient of a (kSide 0) or b (kSide 1): a thread per element of g (n_out of them), each
// summing n_reduced terms.
template <typename T, int kSide>
__global__ void WhereGrad(const T* dy, const T* c, T* g, GpuAxes kept, GpuAxes reduced, int64 n_out,
                          int64 n_reduced, int req) {
  typedef typename Arith<T>::type A;
  for (int64 t = GlobalThread(); t < n_out; t += GridThreads()) {
    int64 base[3] = {0, 0, 0};
    AddOffsets(kept, t, base);
    A sum = A(-0.0);
    for (int64 r = 0; r < n_reduced; ++r) {
      int64 off[3] = {base[0], base[1], 0};
      AddOffsets(reduced, r, off);
      const A cond = ToArith(c[off[1]]);
      sum += ToArith(dy[off[0]]) * (kSide == 0 ? fn::Where::DA(cond) : fn::Where::DB(cond));
    }
    Store1(g + t, sum, req);
  }
}

}  // namespace weft
