// Cast's conversion on the CPU (ops/cpu/cast.cc), for other kernels that convert a tensor: out =
// in converted to out's dtype, or out += it (through double, so a bfloat16 sum rounds once);
// float32 <-> bfloat16 written runs the vectorized loops (WidenBf16, NarrowBf16).
//
//   CastTensor(float_buffer, OpReq::kWrite, bf16_output);
#pragma once

#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft::cpu {

void CastTensor(const TensorView& in, OpReq req, const TensorView& out);

}  // namespace weft::cpu
