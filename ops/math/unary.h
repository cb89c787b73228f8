// The math of the elementwise unary ops (ops/elementwise/unary.cc defines the ops), written once
// for the CPU loops, the GPU kernels and the fusion code generator (ops/math/base.h says how).
//
// Each functor has Fwd(x, s) and Grad(x, y, s) = dy/dx at x, given y = Fwd(x, s), in the
// arithmetic type A (float for float32 and bfloat16, double for float64); s is the op's `scalar`
// attribute (0 for ops without one), and kGradReads says which of x and y Grad reads. A functor
// that declares kScalars = 2 takes two scalars instead, Fwd(x, s, t) and Grad(x, y, s, t) (clip's
// a_min and a_max); code that calls any functor goes through ForwardOf and BackwardOf, which pass
// each the scalars it takes. The backward op `_backward_<name>` gives dx = dy * Grad
// (BackwardOf).
//
// NaN, infinities and signed zeros: comparisons are written `Select(x < c, c, x)` (std::max's
// form), so a NaN x stays NaN (relu, maximum_scalar) and -0 stays -0; gradients of comparisons
// are 0 at NaN. Only Exp, Log, Log1p, Tanh, Erf (and what uses them) differ between the devices, by
// the documented ulps of the two math libraries: CUDA's expf 2, logf 1, log1pf 1, tanhf 2, erff 2
// and 1 each in double (erf 2); glibc's 1 (tanh 2, erf 1); the host's float Exp, Tanh and Erf are
// weft's own (ops/math/base.h), within 1, 1.5 and 1.5 ulp of the exact result for every float, so
// Exp differs from CUDA's expf by at most 3.
#pragma once

#include "ops/math/base.h"

namespace weft::fn {

// What a functor's Grad reads besides the scalar: the input x, the output y, or neither (every
// Grad here reads one at most). `_backward_<name>` takes dy and that value only (unary.cc), so a
// graph keeps alive, and a fused forward group stores, only what the gradient needs: a chain's
// mul_scalar and add_scalar steps need nothing of the forward (MXNet's ElemwiseGradUseNone).
enum class GradReads : unsigned char { kNothing, kInput, kOutput };

// How many scalars F takes: F::kScalars where F declares it, else 1.
template <typename F, typename = void>
struct ScalarCount {
  static constexpr int value = 1;
};
template <typename F>
struct ScalarCount<F, decltype(void(F::kScalars))> {
  static constexpr int value = F::kScalars;
};

// F::Fwd(x, s) or, for a functor of two scalars, F::Fwd(x, s, t). What every forward of a unary op
// computes: the CPU loops, the GPU kernels and the fused kernels call it (or F::Fwd itself).
template <typename F, typename A>
WEFT_HOST_DEVICE inline A ForwardOf(A x, A s, A t) {
  if constexpr (ScalarCount<F>::value == 2) {
    return F::Fwd(x, s, t);
  } else {
    return F::Fwd(x, s);
  }
}

// F::Grad(x, y, s) or F::Grad(x, y, s, t), as ForwardOf.
template <typename F, typename A>
WEFT_HOST_DEVICE inline A GradOf(A x, A y, A s, A t) {
  if constexpr (ScalarCount<F>::value == 2) {
    return F::Grad(x, y, s, t);
  } else {
    return F::Grad(x, y, s);
  }
}

// dx = dy * F::Grad at one element, given `v`: x or y, as F::kGradReads says (anything for
// kNothing); t: the second scalar, for functors that take two. What every backward of a unary op
// computes: the CPU loops, the GPU kernels and the fusion code generator call it.
template <typename F, typename A>
WEFT_HOST_DEVICE inline A BackwardOf(A dy, A v, A s, A t = A(0)) {
  if constexpr (F::kGradReads == GradReads::kInput) {
    return dy * GradOf<F>(v, A(0), s, t);
  } else {
    return dy * GradOf<F>(A(0), v, s, t);
  }
}

struct Identity {  // _copy
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return x;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A) {
    return A(1);
  }
};
struct Neg {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return -x;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A) {
    return A(-1);
  }
};
struct Exp {
  static constexpr GradReads kGradReads = GradReads::kOutput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Exp(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A y, A) {
    return y;
  }
};
struct Log {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Log(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return A(1) / x;
  }
};
struct Sqrt {
  static constexpr GradReads kGradReads = GradReads::kOutput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Sqrt(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A y, A) {
    return A(0.5) / y;
  }
};
struct Square {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return x * x;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return A(2) * x;
  }
};
struct Abs {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Fabs(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return math::Select(x > A(0), A(1), A(0)) - math::Select(x < A(0), A(1), A(0));
  }
};
struct Sigmoid {
  static constexpr GradReads kGradReads = GradReads::kOutput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return A(1) / (A(1) + math::Exp(-x));
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A y, A) {
    return y * (A(1) - y);
  }
};
struct Tanh {
  static constexpr GradReads kGradReads = GradReads::kOutput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Tanh(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A y, A) {
    return A(1) - y * y;
  }
};
// Branch-free on the CPU (a compare turned into a mask, so the loop vectorizes).
struct Relu {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Select(x < A(0), A(0), x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return math::Select(x > A(0), A(1), A(0));
  }
};
// min(max(x, 0), 6), with PyTorch's gradient (hardtanh's): 1 strictly between the bounds, so the
// output tells it as well as the input does (0 < y < 6 exactly where 0 < x < 6).
struct Relu6 {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    const A above = math::Select(x < A(0), A(0), x);
    return math::Select(A(6) < above, A(6), above);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return math::Select(x > A(0), A(1), A(0)) * math::Select(x < A(6), A(1), A(0));
  }
};
struct SoftRelu {  // log(1 + exp(x)), computed without overflow
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Select(x > A(20), x, math::Log1p(math::Exp(x)));
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return A(1) / (A(1) + math::Exp(-x));
  }
};
struct Erf {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return math::Erf(x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return A(1.1283791670955126) * math::Exp(-x * x);  // 2 / sqrt(pi) exp(-x^2)
  }
};
// gelu's exact form, PyTorch's default (approximate = "none"): x Phi(x), Phi the standard normal
// CDF, 0.5 x (1 + erf(x / sqrt(2))).
struct Gelu {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return A(0.5) * x * (A(1) + math::Erf(x * A(0.7071067811865476)));
  }
  // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    return A(0.5) * (A(1) + math::Erf(x * A(0.7071067811865476))) +
           x * A(0.3989422804014327) * math::Exp(A(-0.5) * x * x);
  }
};
// gelu's tanh approximation (approximate = "tanh"), as in BERT and GPT-2:
// 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), computed as x sigmoid(2 u) =
// x / (1 + exp(-2 u)), the same function (0.5 (1 + tanh(u)) = sigmoid(2 u)): one exp and one
// division, which the host's loops vectorize with weft's own Exp, and no cancellation for
// negative x (1 + tanh(u) loses the low bits there). exp's +inf (x below about -10) gives -0.
struct GeluTanh {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Inner(A x) {
    return A(0.7978845608028654) *
           (x + A(0.044715) * x * x * x);  // sqrt(2 / pi) (x + 0.044715 x^3)
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A) {
    return x / (A(1) + math::Exp(A(-2) * Inner(x)));
  }
  // s + 2 x s (1 - s) u', s = sigmoid(2 u), u' = sqrt(2 / pi) (1 + 3 * 0.044715 x^2).
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A) {
    const A s = A(1) / (A(1) + math::Exp(A(-2) * Inner(x)));
    return s +
           A(2) * x * s * (A(1) - s) * A(0.7978845608028654) * (A(1) + A(3) * A(0.044715) * x * x);
  }
};

// Scalar forms: s is the attribute `scalar`.
struct AddScalar {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return x + s;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A) {
    return A(1);
  }
};
struct SubScalar {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return x - s;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A) {
    return A(1);
  }
};
struct RSubScalar {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return s - x;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A) {
    return A(-1);
  }
};
struct MulScalar {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return x * s;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A s) {
    return s;
  }
};
struct DivScalar {
  static constexpr GradReads kGradReads = GradReads::kNothing;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return x / s;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A, A, A s) {
    return A(1) / s;
  }
};
struct RDivScalar {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return s / x;
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A s) {
    return -s / (x * x);
  }
};
struct MaxScalar {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return math::Select(x < s, s, x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A s) {
    return math::Select(x > s, A(1), A(0));
  }
};
struct MinScalar {
  static constexpr GradReads kGradReads = GradReads::kInput;
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A s) {
    return math::Select(s < x, s, x);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A s) {
    return math::Select(x < s, A(1), A(0));
  }
};

// clip: min(max(x, a_min), a_max) (ops/elementwise/unary.cc; ReLU6 is clip(x, 0, 6)), NaN stays
// NaN. The gradient passes where a_min <= x <= a_max, the bounds included, as PyTorch's clamp
// (and MXNet's clip); it is 0 outside and at NaN.
struct Clip {
  static constexpr GradReads kGradReads = GradReads::kInput;
  static constexpr int kScalars = 2;  // a_min, a_max
  template <typename A>
  WEFT_HOST_DEVICE static A Fwd(A x, A lo, A hi) {
    const A above = math::Select(x < lo, lo, x);
    return math::Select(hi < above, hi, above);
  }
  template <typename A>
  WEFT_HOST_DEVICE static A Grad(A x, A, A lo, A hi) {
    return math::Select(x >= lo, A(1), A(0)) * math::Select(x <= hi, A(1), A(0));
  }
};

}  // namespace weft::fn
