// The math of the elementwise ternary op `where` (ops/elementwise/where.cc defines it), written
// once for the CPU loops, the GPU kernels and the fusion code generator (ops/math/base.h says how).
//
// Fwd(c, a, b) picks a where c is nonzero (NaN included, as numpy's where), else b; DA(c) and
// DB(c) are its partial derivatives with respect to a and b (1 where that operand was picked, 0
// elsewhere); c gets no gradient.
#pragma once

#include "ops/math/base.h"

namespace weft::fn {

struct Where {
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A c, A a, A b) {
    return math::Select(c != A(0), a, b);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DA(A c) {
    return math::Select(c != A(0), A(1), A(0));
  }
  template <typename A>
  WEFT_HOST_DEVICE static A DB(A c) {
    return math::Select(c != A(0), A(0), A(1));
  }
};

}  // namespace weft::fn
