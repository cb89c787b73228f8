// WEFT_HOST_DEVICE: the qualifier of a function that the host compiler and NVRTC both compile,
// from a header that is included on the host and embedded for the GPU kernels (ops/gpu/BUILD's
// embed_kernels: core/philox.h, ops/math/*.h). Such a header holds device-neutral code only: no
// system headers under NVRTC (`__CUDACC_RTC__`), no exceptions, no globals.
//
//   WEFT_HOST_DEVICE inline float Twice(float x) { return 2 * x; }
#pragma once

#if defined(__CUDACC_RTC__)
#define WEFT_HOST_DEVICE __device__
#else
// Always inlined on the host: the CPU loops that call the pointwise functors are compiled once per
// vector width (WEFT_CPU_VECTOR_CLONES), and a functor on math::Lanes (ops/math/base.h), a 64-byte
// vector, would otherwise be called across widths whose calling conventions for it differ
// (-Wpsabi).
#define WEFT_HOST_DEVICE __attribute__((always_inline))
#endif
