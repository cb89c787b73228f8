// A reduction other GPU computes call (ops/gpu/reduce.cc runs it, with the sum op's kernels).
#pragma once

#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft::gpu {

// out (cols) = the sum of x's rows (x: rows x cols), as `req` says: a layer's bias gradient.
// float32, float64, bfloat16 (accumulated in float). With few columns of many rows it keeps
// partial sums in the call's workspace, unless `workspace` is false (x itself is in the
// workspace, which a new request would replace).
void SumRowsGpu(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& out,
                bool workspace = true);

}  // namespace weft::gpu
