// A reduction other GPU computes call (ops/gpu/reduce.cc runs it, with the sum op's kernels).
#pragma once

#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft::gpu {

// out (cols) = the sum of x's rows (x: rows x cols), as `req` says: a layer's bias gradient.
// float32, float64, bfloat16 (accumulated in float).
void SumRowsGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& out);

}  // namespace weft::gpu
