// What the pointwise math of ops/math shares, on the host and on the GPU alike: the qualifier
// that makes a function callable from both (core/host_device.h), and the elementary functions by
// type (float, double), which map to the C++ library on the host and to CUDA's on the device,
// except the host's float exp, tanh and erf: weft's own (host::ExpFloat, host::TanhFloat,
// host::ErfFloat below), which a loop marked `omp simd` vectorizes (glibc's are a call per
// element).
//
// Every header of ops/math is included twice over: by the host compiler for the CPU loops
// (ops/cpu) and, embedded into the binary, by NVRTC for the GPU kernels (ops/gpu/kernels), so both
// devices run the same functor code. So these headers hold device-neutral code only: no host-only
// library calls outside this file, no system headers under NVRTC, no exceptions, no globals.
//
//   struct Square { template <typename A> WEFT_HOST_DEVICE static A Fwd(A x, A) { return x * x; }
//   }; float y = weft::math::Exp(1.0f);
#pragma once

#include "core/host_device.h"

#if !defined(__CUDACC_RTC__)
#include <bit>
#include <cmath>
#include <cstdint>
#endif

namespace weft::math {

#if !defined(__CUDACC_RTC__)
namespace host {

// exp(x) in float, within 1 ulp of the exact value for every float x (checked on all 2^32 of
// them, largest error 0.991 ulp; tests/math_exp_test.cc sweeps them densely), +inf past
// ln(FLT_MAX), 0 below ln(2^-150) (subnormals between), exp(-0) = 1, NaN stays NaN. Straight-line
// float and integer arithmetic, no branch and no call, so a loop marked `omp simd` vectorizes it,
// and each lane computes what a scalar call does (the same IEEE operations: bit for bit, as long
// as the compiler contracts neither or both into FMA, which it cannot for x86-64-v2).
//
// Cephes' expf: n = round(x log2(e)), r = x - n ln(2) in two parts (n * 0.693359375 is exact, and
// so is the difference by Sterbenz), exp(r) = 1 + r + r^2 P(r) on |r| <= ln(2) / 2, then times 2^n
// as 2^(n/2) 2^(n - n/2), both normal, so that the one product that may round into subnormals or
// overflow rounds once. Outside [-104, 89] (where n would leave the range the two factors cover)
// the result is replaced by +inf or 0 through a bit mask, not a select: GCC sinks the arithmetic
// into the branch of a select and then leaves the loop scalar.
WEFT_HOST_DEVICE inline float ExpFloat(float x) {
  constexpr float kShift =
      12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, kept in the low bits
  const float t = x * 1.44269504088896341f + kShift;
  const float n = t - kShift;
  const float r =
      (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln(2) = 0.693359375 - 2.12194440e-4
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = (p * (r * r) + r) + 1.0f;
  const int32_t k =
      std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);  // n, in [-150, 129] here
  const int32_t k1 = k >> 1, k2 = k - k1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
  const uint32_t over = 0u - static_cast<uint32_t>(x > 89.0f),
                 under = 0u - static_cast<uint32_t>(x < -104.0f);
  const uint32_t bits = std::bit_cast<uint32_t>(e * s1 * s2);
  return std::bit_cast<float>((bits & ~(over | under)) | (over & 0x7f800000u));
}

// tanh(x) in float within 1.5 ulp of the exact value (largest seen 1.33, near 0.628, where the
// forms meet: tests/math_tanh_test.cc sweeps every float densely), odd to the bit, tanh(+-0) =
// +-0, +-1 past 9.1, NaN stays NaN; straight-line like ExpFloat,
// so a loop marked `omp simd` vectorizes it (glibc's tanhf is a call per element, through expm1f).
// Cephes' tanhf on |x|: an odd polynomial a + a^3 P(a^2) below 0.625, 1 - 2 / (exp(2a) + 1) from
// there, joined through bit masks, not a select (see ExpFloat); then x's sign.
WEFT_HOST_DEVICE inline float TanhFloat(float x) {
  const uint32_t sign = std::bit_cast<uint32_t>(x) & 0x80000000u;
  const float a = std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ sign);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * a + a;  // on |x|, so that tanh(-0) keeps its sign (-0 + +0 is +0)
  const float large = 1.0f - 2.0f / (ExpFloat(a + a) + 1.0f);  // in [0.43, 1]; exp's +inf gives 1
  const uint32_t use_small = 0u - static_cast<uint32_t>(a < 0.625f);
  const uint32_t bits =
      (std::bit_cast<uint32_t>(small) & use_small) | (std::bit_cast<uint32_t>(large) & ~use_small);
  return std::bit_cast<float>(bits | sign);
}

// erf(x) in float within 1.5 ulp of the exact value (tests/math_erf_test.cc sweeps every float
// densely), odd to the bit, erf(+-0) = +-0, +-1 from |x| near 3.92 on (where 1 - erfc(x) rounds
// to 1), NaN stays NaN; straight-line like ExpFloat, so a loop marked `omp simd` vectorizes it
// (glibc's erff branches by range and is a call per element: the exact GELU's loop and fused groups
// spent most of their time in it). Two forms on a = |x|, joined through bit masks (see ExpFloat),
// then x's sign: a + a P(a^2) below 0.921875, and 1 - exp(-(a + a Q(a))) from there, a clamped to
// 4 (past which erf rounds to 1). P (degree 5) and Q (degree 6) are weighted minimax fits to
// (erf(a) - a) / a and (-log(erfc(a)) - a) / a in double (Lawson's iteration, the weights the
// relative error of erf), rounded to float.
WEFT_HOST_DEVICE inline float ErfFloat(float x) {
  const uint32_t sign = std::bit_cast<uint32_t>(x) & 0x80000000u;
  const float a = std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ sign);
  const float z = a * a;
  float p = -5.991075304e-4f;
  p = p * z + 4.993224051e-3f;
  p = p * z - 2.676664665e-2f;
  p = p * z + 1.128181666e-1f;
  p = p * z - 3.761249483e-1f;
  p = p * z + 1.283791512e-1f;
  const float small = p * a + a;
  const uint32_t past = 0u - static_cast<uint32_t>(a > 4.0f);  // NaN stays NaN
  const float c = std::bit_cast<float>((std::bit_cast<uint32_t>(a) & ~past) |
                                       (std::bit_cast<uint32_t>(4.0f) & past));
  float q = 1.130576948e-5f;
  q = q * c - 3.235483891e-4f;
  q = q * c + 3.645482939e-3f;
  q = q * c - 2.376845106e-2f;
  q = q * c + 1.062442884e-1f;
  q = q * c + 6.351468563e-1f;
  q = q * c + 1.286495924e-1f;
  const float large = 1.0f - ExpFloat(-(q * c + c));
  const uint32_t use_small = 0u - static_cast<uint32_t>(a < 0.921875f);
  const uint32_t bits =
      (std::bit_cast<uint32_t>(small) & use_small) | (std::bit_cast<uint32_t>(large) & ~use_small);
  return std::bit_cast<float>(bits | sign);
}

}  // namespace host
#endif

// Name(x) for float and double: CUDA's f32 and f64 under NVRTC, host32 and host64 on the host.
#if defined(__CUDACC_RTC__)
#define WEFT_MATH_FUNCTION(Name, f32, f64, host32, host64)       \
  WEFT_HOST_DEVICE inline float Name(float x) { return f32(x); } \
  WEFT_HOST_DEVICE inline double Name(double x) { return f64(x); }
#else
#define WEFT_MATH_FUNCTION(Name, f32, f64, host32, host64)          \
  WEFT_HOST_DEVICE inline float Name(float x) { return host32(x); } \
  WEFT_HOST_DEVICE inline double Name(double x) { return host64(x); }
#endif
WEFT_MATH_FUNCTION(Exp, expf, exp, host::ExpFloat, std::exp)
WEFT_MATH_FUNCTION(Log, logf, log, std::log, std::log)
WEFT_MATH_FUNCTION(Log1p, log1pf, log1p, std::log1p, std::log1p)
WEFT_MATH_FUNCTION(Sqrt, sqrtf, sqrt, std::sqrt, std::sqrt)
WEFT_MATH_FUNCTION(Tanh, tanhf, tanh, host::TanhFloat, std::tanh)
WEFT_MATH_FUNCTION(Fabs, fabsf, fabs, std::fabs, std::fabs)
WEFT_MATH_FUNCTION(Erf, erff, erf, host::ErfFloat, std::erf)
#undef WEFT_MATH_FUNCTION

// c ? a : b. The functors write their comparisons with it, so that they also take Lanes (below),
// whose comparisons give a mask.
template <typename A>
WEFT_HOST_DEVICE inline A Select(bool c, A a, A b) {
  return c ? a : b;
}

#if !defined(__CUDACC_RTC__)
// Lanes: 16 float lanes as one value, for the host only: a functor instantiated on it computes 16
// elements at once, each lane with the IEEE operations (and so the bits) of the float functor,
// and its values stay in vector registers from one functor to the next: the CPU's fused tiles
// run a chain of unary steps this way (ops/cpu/lane_chain.cc). A GCC vector type: one AVX-512
// register, two AVX2 or four SSE registers, as the function using it is compiled.
struct LaneMask {
  using Bits = int32_t __attribute__((vector_size(64)));
  Bits bits;  // all ones where true
};
struct Lanes {
  static constexpr int kWidth = 16;
  using Vector = float __attribute__((vector_size(64)));
  Vector v;

  Lanes() = default;
  WEFT_HOST_DEVICE explicit Lanes(Vector x) : v(x) {}
  template <typename S>
  WEFT_HOST_DEVICE explicit Lanes(S s)
      : v(static_cast<float>(s) - Vector{}) {}  // s - +0 is s, -0 included
};
WEFT_HOST_DEVICE inline Lanes operator+(Lanes a, Lanes b) { return Lanes(a.v + b.v); }
WEFT_HOST_DEVICE inline Lanes operator-(Lanes a, Lanes b) { return Lanes(a.v - b.v); }
WEFT_HOST_DEVICE inline Lanes operator*(Lanes a, Lanes b) { return Lanes(a.v * b.v); }
WEFT_HOST_DEVICE inline Lanes operator/(Lanes a, Lanes b) { return Lanes(a.v / b.v); }
WEFT_HOST_DEVICE inline Lanes operator-(Lanes a) { return Lanes(-a.v); }
WEFT_HOST_DEVICE inline LaneMask operator<(Lanes a, Lanes b) { return {a.v < b.v}; }
WEFT_HOST_DEVICE inline LaneMask operator>(Lanes a, Lanes b) { return {a.v > b.v}; }
WEFT_HOST_DEVICE inline LaneMask operator<=(Lanes a, Lanes b) { return {a.v <= b.v}; }
WEFT_HOST_DEVICE inline LaneMask operator>=(Lanes a, Lanes b) { return {a.v >= b.v}; }
WEFT_HOST_DEVICE inline Lanes Select(LaneMask c, Lanes a, Lanes b) {
  return Lanes(c.bits ? a.v : b.v);
}

// The elementary functions lane by lane, through the float ones above (a loop the compiler
// vectorizes where the float function is straight-line code: Exp, Tanh, Erf, Sqrt, Fabs).
#define WEFT_LANEWISE(Name)                                                                \
  WEFT_HOST_DEVICE inline Lanes Name(Lanes x) {                                            \
    Lanes r;                                                                               \
    _Pragma("omp simd") for (int i = 0; i < Lanes::kWidth; ++i) { r.v[i] = Name(x.v[i]); } \
    return r;                                                                              \
  }
WEFT_LANEWISE(Exp)
WEFT_LANEWISE(Log)
WEFT_LANEWISE(Log1p)
WEFT_LANEWISE(Sqrt)
WEFT_LANEWISE(Tanh)
WEFT_LANEWISE(Fabs)
WEFT_LANEWISE(Erf)
#undef WEFT_LANEWISE
#endif

}  // namespace weft::math
