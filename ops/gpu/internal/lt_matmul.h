// A GEMM with the bias added in cuBLASLt's epilogue: D = A^T B + bias (+ D when accumulating),
// column-major, as FullyConnected's forward computes it: one kernel, one rounding, no extra pass
// over the output. float32 (strict FP32 compute, no TF32) and bfloat16 (FP32 accumulation).
// Plans (descriptors, layouts, the algorithm cuBLASLt's heuristic picks) are cached per thread and
// shape.
//
//   LtBiasGemm(call, DType::kFloat32, {o, m, k}, w, x, bias, y, /*accumulate=*/false);
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "ops/gpu/internal/gpu_call.h"

namespace weft::gpu {

struct LtGemmShape {
  int64_t m, n, k;  // D is (m, n) column-major; A is stored (k, m) and transposed; B is (k, n)
};

// True when LtBiasGemm takes `dtype` (float32, bfloat16).
bool LtBiasGemmSupports(DType dtype);

void LtBiasGemm(const GpuCall& call, DType dtype, const LtGemmShape& shape, const void* a,
                const void* b, const void* bias, void* d, bool accumulate);

}  // namespace weft::gpu
