// A reduction other GPU computes call (ops/gpu/reduce.cc runs it, with the sum op's kernels).
#pragma once

#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft::gpu {

// out (cols) = the sum of x's rows (x: rows x cols), as `req` says: a layer's bias gradient.
// float32, float64, bfloat16 (accumulated in float). With few columns of many rows it keeps
// partial sums in `scratch` (SumRowsScratchBytes of them for an x that starts on 16 bytes, as a
// workspace part does) or, when that is null, in the call's workspace (a caller whose x is in the
// workspace passes scratch from its own request: a new request would replace x).
size_t SumRowsScratchBytes(const Shape& x, DType dtype);
void SumRowsGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& out,
                void* scratch = nullptr);

}  // namespace weft::gpu
