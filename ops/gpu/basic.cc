// GPU compute of the small utility ops of ops/tensor/basic.cc: zeros_like and ones_like (float32,
// float64, bfloat16, int32, int64, uint8), _copy and stop_gradient (any dtype; adding to the
// output: float32, float64, bfloat16).
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

template <int kValue>
void FillCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView>,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  FillGpu(ctx, kValue, req[0], out[0]);
}

void CopyCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  CopyGpu(ctx, in[0], req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {
                                                 {"zeros_like", {.compute = FillCompute<0>}},
                                                 {"ones_like", {.compute = FillCompute<1>}},
                                                 {"_copy", {.compute = CopyCompute}},
                                                 {"stop_gradient", {.compute = CopyCompute}},
                                             });

}  // namespace
}  // namespace weft::gpu
