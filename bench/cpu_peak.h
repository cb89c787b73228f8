// This machine's arithmetic peak on the CPU, measured rather than taken from a data sheet:
// `threads` threads each run independent chains of AVX-512 float32 FMAs (vfmadd, 32 flops an
// instruction) or of bfloat16 dot products (vdpbf16ps, 64 flops), the best of three runs. A
// convolution or matrix product of F flops takes at least F / peak on these threads, whoever
// implements it: the floor against which a benchmark's time and a goal stated as a ratio to a peer
// can be read.
//
//   bench::CpuPeak p = bench::MeasureCpuPeak(2);   // p.fp32_gflops, p.bf16_gflops (0: no such
//   unit)
#pragma once

namespace bench {

struct CpuPeak {
  double fp32_gflops = 0;  // AVX-512 FMA; 0 without AVX-512
  double bf16_gflops = 0;  // AVX-512 BF16 dot products; 0 without them
};

CpuPeak MeasureCpuPeak(int threads);

}  // namespace bench
