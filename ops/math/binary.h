// The math of the elementwise binary ops (ops/elementwise/binary.cc defines the ops), written once
// for the CPU loops, the GPU kernels and the fusion code generator (ops/math/base.h says how).
//
// Each functor has Fwd(l, r) and its partial derivatives DL = d/dl and DR = d/dr at (l, r), in
// the arithmetic type A (float for float32 and bfloat16, double for float64). The backward op
// `_backward_<name>` gives dl = dy * DL(l, r) and dr = dy * DR(l, r), summed over the axes an
// operand was broadcast along.
//
// NaN and signed zeros in maximum and minimum: `l >= r ? l : r` (MXNet's form, not std::max's)
// gives the rhs whenever the comparison is false, so maximum(NaN, 1) = 1 while maximum(1, NaN) =
// NaN, and on a tie (-0 vs +0) the lhs. On a tie the gradient goes to the lhs; where either
// operand is NaN both gradients are 0 (every comparison is false), as in ops/math/unary.h.
#pragma once

#include "ops/math/base.h"

namespace weft::fn {

struct Add {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return l + r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A, A) {
    return A(1);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A, A) {
    return A(1);
  }
};
struct Sub {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return l - r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A, A) {
    return A(1);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A, A) {
    return A(-1);
  }
};
struct Mul {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return l * r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A, A r) {
    return r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A l, A) {
    return l;
  }
};
struct Div {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return l / r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A, A r) {
    return A(1) / r;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A l, A r) {
    return -l / (r * r);
  }
};
struct Max {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return math::Select(l >= r, l, r);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A l, A r) {
    return static_cast<A>(l >= r);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A l, A r) {
    return static_cast<A>(l < r);
  }
};
struct Min {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A l, A r) {
    return math::Select(l <= r, l, r);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DL(A l, A r) {
    return static_cast<A>(l <= r);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DR(A l, A r) {
    return static_cast<A>(l > r);
  }
};

}  // namespace weft::fn
