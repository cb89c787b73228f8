// Elementwise unary ops, their scalar-operand forms and their gradients, as ops/cpu/unary.cc
// defines them: each functor has Fwd(x, scalar) and Grad(x, y, scalar) = dy/dx, in the
// arithmetic type A (float for float32 and bfloat16, double for float64). Comparisons are written
// as std::max and std::min are, so NaN goes the same way as on the CPU.
#pragma once

#include "common.cuh"

namespace weft {

struct Identity { template <typename A> __device__ static A Fwd(A x, A) { return x; } template <typename A> __device__ static A Grad(A, A, A) { return 1; } };
struct Neg { template <typename A> __device__ static A Fwd(A x, A) { return -x; } template <typename A> __device__ static A Grad(A, A, A) { return -1; } };
struct ExpF { template <typename A> __device__ static A Fwd(A x, A) { return Exp(x); } template <typename A> __device__ static A Grad(A, A y, A) { return y; } };
struct LogF { template <typename A> __device__ static A Fwd(A x, A) { return Log(x); } template <typename A> __device__ static A Grad(A x, A, A) { return 1 / x; } };
struct SqrtF { template <typename A> __device__ static A Fwd(A x, A) { return Sqrt(x); } template <typename A> __device__ static A Grad(A, A y, A) { return A(0.5) / y; } };
struct Square { template <typename A> __device__ static A Fwd(A x, A) { return x * x; } template <typename A> __device__ static A Grad(A x, A, A) { return 2 * x; } };
struct Abs { template <typename A> __device__ static A Fwd(A x, A) { return Fabs(x); } template <typename A> __device__ static A Grad(A x, A, A) { return static_cast<A>(x > 0) - static_cast<A>(x < 0); } };
struct Sigmoid { template <typename A> __device__ static A Fwd(A x, A) { return 1 / (1 + Exp(-x)); } template <typename A> __device__ static A Grad(A, A y, A) { return y * (1 - y); } };
struct TanhF { template <typename A> __device__ static A Fwd(A x, A) { return Tanh(x); } template <typename A> __device__ static A Grad(A, A y, A) { return 1 - y * y; } };
struct Relu { template <typename A> __device__ static A Fwd(A x, A) { return x < A(0) ? A(0) : x; } template <typename A> __device__ static A Grad(A x, A, A) { return x > 0 ? A(1) : A(0); } };
struct SoftRelu {  // log(1 + exp(x)), computed without overflow
  template <typename A> __device__ static A Fwd(A x, A) { return x > 20 ? x : Log1p(Exp(x)); }
  template <typename A> __device__ static A Grad(A x, A, A) { return 1 / (1 + Exp(-x)); }
};
struct Gelu {  // the tanh approximation
  template <typename A> __device__ static A Fwd(A x, A) {
    return A(0.5) * x * (1 + Tanh(A(0.7978845608028654) * (x + A(0.044715) * x * x * x)));
  }
  template <typename A> __device__ static A Grad(A x, A, A) {
    const A u = A(0.7978845608028654) * (x + A(0.044715) * x * x * x);
    const A t = Tanh(u);
    return A(0.5) * (1 + t) + A(0.5) * x * (1 - t * t) * A(0.7978845608028654) * (1 + 3 * A(0.044715) * x * x);
  }
};
struct AddScalar { template <typename A> __device__ static A Fwd(A x, A s) { return x + s; } template <typename A> __device__ static A Grad(A, A, A) { return 1; } };
struct SubScalar { template <typename A> __device__ static A Fwd(A x, A s) { return x - s; } template <typename A> __device__ static A Grad(A, A, A) { return 1; } };
struct RSubScalar { template <typename A> __device__ static A Fwd(A x, A s) { return s - x; } template <typename A> __device__ static A Grad(A, A, A) { return -1; } };
struct MulScalar { template <typename A> __device__ static A Fwd(A x, A s) { return x * s; } template <typename A> __device__ static A Grad(A, A, A s) { return s; } };
struct DivScalar { template <typename A> __device__ static A Fwd(A x, A s) { return x / s; } template <typename A> __device__ static A Grad(A, A, A s) { return 1 / s; } };
struct RDivScalar { template <typename A> __device__ static A Fwd(A x, A s) { return s / x; } template <typename A> __device__ static A Grad(A x, A, A s) { return -s / (x * x); } };
struct MaxScalar { template <typename A> __device__ static A Fwd(A x, A s) { return x < s ? s : x; } template <typename A> __device__ static A Grad(A x, A, A s) { return static_cast<A>(x > s); } };
struct MinScalar { template <typename A> __device__ static A Fwd(A x, A s) { return s < x ? s : x; } template <typename A> __device__ static A Grad(A x, A, A s) { return static_cast<A>(x < s); } };

// y = F(x), n elements (in place allowed: y == x).
template <class F, typename T, int V>
__global__ void UnaryForward(const T* x, T* y, int64 n, double scalar, int req) {
  typedef typename Arith<T>::type A;
  const A s = static_cast<A>(scalar);
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A v[W];
    LoadN<W>(x + i, v);
#pragma unroll
    for (int j = 0; j < W; ++j) v[j] = F::Fwd(v[j], s);
    StoreN<W>(y + i, v, req);
  });
}

// dx = dy * F'(x) given y = F(x), n elements (in place allowed: dx == dy).
template <class F, typename T, int V>
__global__ void UnaryBackward(const T* dy, const T* x, const T* y, T* dx, int64 n, double scalar, int req) {
  typedef typename Arith<T>::type A;
  const A s = static_cast<A>(scalar);
  ForEachPack<V>(n, [&](int64 i, auto w) {
    constexpr int W = decltype(w)::value;
    A g[W], in[W], out[W];
    LoadN<W>(dy + i, g);
    LoadN<W>(x + i, in);
    LoadN<W>(y + i, out);
#pragma unroll
    for (int j = 0; j < W; ++j) g[j] = g[j] * F::Grad(in[j], out[j], s);
    StoreN<W>(dx + i, g, req);
  });
}

}  // namespace weft
