// weft's GEMMs through cuBLASLt, with plans (descriptors, layouts, the algorithm cuBLASLt's
// heuristic picks) cached per thread and shape:
//   - LtBiasGemm: D = A^T B + bias (+ D when accumulating), column-major, the bias (and a relu
//     or GELU after it) added in cuBLASLt's epilogue, as FullyConnected's forward computes it:
//     one kernel, one rounding, no extra pass over the output. float32 and bfloat16.
//   - LtWeightGradGemm: D = A B^T (+ D when accumulating) and the bias gradient, the sum of B over
//     the product's k, in cuBLASLt's BGRADB epilogue, as FullyConnected's backward computes its
//     weight and bias gradients: one kernel instead of a GEMM and a reduction over out_grad.
//   - LtBatchGemm: a row-major batched product of batch_dot (ops/nn/batch_gemm.h), strided
//     batched, broadcast operands read through batch strides of 0. float32, bfloat16 and float64.
// float32 is strict FP32 compute (no TF32), bfloat16 accumulates in FP32.
//
//   LtBiasGemm(call, DType::kFloat32, {o, m, k}, w, x, bias, y, /*accumulate=*/false);
//   void* ws = call.Workspace({LtBatchGemmWorkspace(call, dtype, g)})[0];
//   LtBatchGemm(call, dtype, g, x, y, z, /*accumulate=*/false, ws);
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/batch_gemm.h"

namespace weft::gpu {

struct LtGemmShape {
  int64_t m, n, k;  // D is (m, n) column-major; A is stored (k, m) and transposed; B is (k, n)
};

// True when LtBiasGemm takes `dtype` (float32, bfloat16).
bool LtBiasGemmSupports(DType dtype);

// What LtBiasGemm's epilogue applies after adding the bias: nothing, relu, or GELU's tanh
// approximation (cuBLASLt's GELU epilogue; weft's gelu_tanh).
enum class LtEpilogue : uint8_t { kBias, kReluBias, kGeluTanhBias };

// D = epilogue(A^T B + bias (+ D when accumulating)): the activation, if any, applies after the
// accumulation, so accumulate only with kBias.
void LtBiasGemm(const GpuCall& call, DType dtype, const LtGemmShape& shape, const void* a,
                const void* b, const void* bias, void* d, bool accumulate,
                LtEpilogue epilogue = LtEpilogue::kBias);

// D (m, n) = A B^T (+ D when accumulating), A stored (m, k) and B stored (n, k) column-major,
// and bias_grad (n) = the sum of B over k, written (cuBLASLt's BGRADB epilogue: never added to).
// A and B float32 or 16-bit floats (LtBiasGemmSupports); D and bias_grad of grad_dtype: dtype, or
// float32 over 16-bit A and B. Returns false, having run nothing, where cuBLASLt has no algorithm
// for the call (the caller runs a GEMM and a reduction instead).
bool LtWeightGradGemm(const GpuCall& call, DType dtype, DType grad_dtype, const LtGemmShape& shape,
                      const void* a, const void* b, void* d, bool accumulate, void* bias_grad);

// The workspace bytes LtBatchGemm needs for `g` (its plan, made now if new).
size_t LtBatchGemmWorkspace(const GpuCall& call, DType dtype, const BatchGemm& g);

// z = op(x) op(y) (+ z when accumulating) for a `g` whose z sums over no axis (StepsOf gives
// such products). Batch axes whose strides merge run as one call, others as one call per index of
// the first axis. `workspace` holds LtBatchGemmWorkspace(call, dtype, g) bytes.
void LtBatchGemm(const GpuCall& call, DType dtype, const BatchGemm& g, const void* x, const void* y,
                 void* z, bool accumulate, void* workspace);

}  // namespace weft::gpu
