// Pooling and _backward_Pooling on the GPU, through cuDNN (ops/nn/pooling.cc says what they
// compute). float32 and float64. Max pooling: padding never wins (CUDNN_POOLING_MAX); average
// pooling counts padding as zeros (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING), as on the CPU.
//
// cudnnPoolingBackward reads the forward output, which _backward_Pooling does not get (its inputs
// are out_grad and data, as on the CPU): it recomputes the forward into the workspace first.
#include <span>

#include "ops/gpu/internal/cudnn_desc.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// The descriptors of one call: data x (N, C, H, W), output y (N, C, OH, OW), the pooling.
struct PoolDescs {
  TensorDesc x, y;
  PoolingDesc pool;
};

PoolDescs DescsOf(const char* op, DType dtype, const PoolCall& call) {
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64});
  const Geometry2d& g = call.g;
  return {NchwDesc(op, dtype, Shape{g.n, g.c, g.h, g.w}),
          NchwDesc(op, dtype, Shape{g.n, g.c, g.oh, g.ow}), PoolingOf(call.win, call.type)};
}

void RunPoolForward(const GpuCall& call, const PoolDescs& m, DType dtype, const void* x, OpReq req,
                    void* y) {
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnPoolingForward(h, m.pool.get(), One(dtype).get(), m.x.get(), x,
                               BetaFor(req, dtype).get(), m.y.get(), y);
  }));
}

// in: (data); out: (output).
void PoolForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall pool = PoolCallOf(a, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  const PoolDescs m = DescsOf("Pooling", dtype, pool);
  const GpuCall call(ctx);
  RunPoolForward(call, m, dtype, in[0].raw(), req[0], out[0].raw());
}

// in: (out_grad, data); out: (d_data).
void PoolBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall pool = PoolCallOf(a, in[1].shape());
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  const PoolDescs m = DescsOf("_backward_Pooling", dtype, pool);
  const GpuCall call(ctx);
  void* y = call.Workspace({in[0].bytes()})[0];
  RunPoolForward(call, m, dtype, in[1].raw(), OpReq::kWrite, y);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnPoolingBackward(h, m.pool.get(), One(dtype).get(), m.y.get(), y, m.y.get(),
                                in[0].raw(), m.x.get(), in[1].raw(), BetaFor(req[0], dtype).get(),
                                m.x.get(), out[0].raw());
  }));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Pooling", {.compute = PoolForwardGpu}},
                               {"_backward_Pooling", {.compute = PoolBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
