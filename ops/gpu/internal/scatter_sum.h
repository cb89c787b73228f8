// Where a GPU kernel sums by atomicAdd (a gradient scattered by indices: Embedding's, take's):
// into the output itself for float32 and float64 (zeroed first unless the request adds), or, for
// bfloat16 and float16, into a zeroed float32 buffer from the call's workspace that Finish then
// stores into the output, rounded once (kernels/scatter_sum.cuh), as the CPU sums in float and
// rounds once.
#pragma once

#include "ops/op.h"

namespace weft::gpu {

class ScatterSum {
 public:
  ScatterSum(const OpContext& ctx, const TensorView& out, OpReq req);
  // What the scattering kernel adds into: of the output's type, or float for 16-bit outputs.
  void* target() const { return target_; }
  // After the scattering kernel: the buffer into the output (nothing for 32- and 64-bit outputs).
  void Finish() const;

 private:
  const OpContext& ctx_;
  const TensorView& out_;
  OpReq req_;
  void* target_;
};

}  // namespace weft::gpu
