// An activation over a tensor on the GPU, as Activation computes it, for ops that apply one after
// their main kernel (a layer's activation epilogue where cuBLASLt has none). Defined in
// ops/gpu/unary.cc, beside Activation's own compute.
//
//   LaunchActivation(ctx, ActType::kGelu, y, OpReq::kWriteInplace, y);
#pragma once

#include "core/tensor_view.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"

namespace weft::gpu {

// y = act(x) with request `req` (y may be x); x and y: one shape.
void LaunchActivation(const OpContext& ctx, ActType act, const TensorView& x, OpReq req,
                      const TensorView& y);

}  // namespace weft::gpu
