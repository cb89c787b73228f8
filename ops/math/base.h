// What the pointwise math of ops/math shares, on the host and on the GPU alike: the qualifier
// that makes a function callable from both, and the elementary functions by type (float, double),
// which map to the C++ library on the host and to CUDA's on the device.
//
// Every header of ops/math is included twice over: by the host compiler for the CPU loops
// (ops/cpu) and, embedded into the binary, by NVRTC for the GPU kernels (ops/gpu/kernels), so both
// devices run the same functor code. So these headers hold device-neutral code only: no host-only
// library calls outside this file, no system headers under NVRTC, no exceptions, no globals.
//
//   struct Square { template <typename A> WEFT_HOST_DEVICE static A Fwd(A x, A) { return x * x; } };
//   float y = weft::math::Exp(1.0f);
#pragma once

#if defined(__CUDACC_RTC__)
#define WEFT_HOST_DEVICE __device__
#else
#include <cmath>
#define WEFT_HOST_DEVICE
#endif

namespace weft::math {

#if defined(__CUDACC_RTC__)
#define WEFT_MATH_FUNCTION(Name, f32, f64, host)                 \
  WEFT_HOST_DEVICE inline float Name(float x) { return f32(x); } \
  WEFT_HOST_DEVICE inline double Name(double x) { return f64(x); }
#else
#define WEFT_MATH_FUNCTION(Name, f32, f64, host)      \
  inline float Name(float x) { return std::host(x); } \
  inline double Name(double x) { return std::host(x); }
#endif
WEFT_MATH_FUNCTION(Exp, expf, exp, exp)
WEFT_MATH_FUNCTION(Log, logf, log, log)
WEFT_MATH_FUNCTION(Log1p, log1pf, log1p, log1p)
WEFT_MATH_FUNCTION(Sqrt, sqrtf, sqrt, sqrt)
WEFT_MATH_FUNCTION(Tanh, tanhf, tanh, tanh)
WEFT_MATH_FUNCTION(Fabs, fabsf, fabs, fabs)
#undef WEFT_MATH_FUNCTION

}  // namespace weft::math
