// batch_dot, matmul and _backward_batch_dot on the GPU (ops/nn/batch_dot.cc says what they
// compute). Each product is a BatchGemm (ops/nn/batch_gemm.h) run by cuBLASLt, strided batched
// (internal/lt_matmul.h): float32 (strict FP32, no TF32, as FullyConnected), bfloat16 (FP32
// accumulation) and float64. A gradient summed over broadcast batch axes is a product into
// scratch of the full batch, then one product of that scratch with a ones vector (its sum) into
// the output; for bfloat16 the scratch is bfloat16, so such a gradient rounds twice. Requests:
// kAddTo accumulates through the last product's beta; kNull outputs are skipped.
#include <algorithm>
#include <span>
#include <vector>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/lt_matmul.h"
#include "ops/nn/batch_gemm.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

constexpr std::initializer_list<DType> kBatchDotTypes = {DType::kFloat32, DType::kFloat64,
                                                         DType::kBFloat16, DType::kFloat16};

// z = op(x) op(y), summed over z's broadcast axes where it has them, as `req` says.
void RunProduct(const GpuCall& call, DType dtype, const BatchGemm& g, const void* x, const void* y,
                OpReq req, void* z) {
  const bool add = req == OpReq::kAddTo;
  const GemmSteps s = StepsOf(g);
  if (!s.sum) {
    LtBatchGemm(call, dtype, s.product, x, y, z, add,
                call.Workspace({LtBatchGemmWorkspace(call, dtype, s.product)})[0]);
    return;
  }
  const size_t lt = std::max(LtBatchGemmWorkspace(call, dtype, s.product),
                             LtBatchGemmWorkspace(call, dtype, *s.sum));
  const size_t bytes = DTypeSize(dtype);
  const std::vector<void*> ws = call.Workspace({lt, s.scratch_size * bytes, s.ones_size * bytes});
  LtBatchGemm(call, dtype, s.product, x, y, ws[1], false, ws[0]);
  FillGpu(call.ctx(), 1.0, OpReq::kWrite,
          TensorView(ws[2], Shape{s.ones_size}, dtype, Device::Gpu(call.device())));
  LtBatchGemm(call, dtype, *s.sum, ws[1], ws[2], z, add, ws[0]);
}

// in: (a, b); out: (a * b).
void BatchDotForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const DType dtype = in[0].dtype();
  CheckDType("batch_dot", dtype, kBatchDotTypes);
  const BatchDotPlan plan =
      BatchDotPlanOf("batch_dot", a.Get<BatchDotParam>(), in[0].shape(), in[1].shape());
  const GpuCall call(ctx);
  RunProduct(call, dtype, plan.forward, in[0].raw(), in[1].raw(), req[0], out[0].raw());
}

// in: (out_grad, a, b); out: (d_a, d_b).
void BatchDotBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                         std::span<const OpReq> req, std::span<const TensorView> out) {
  const DType dtype = in[0].dtype();
  CheckDType("_backward_batch_dot", dtype, kBatchDotTypes);
  const BatchDotPlan plan =
      BatchDotPlanOf("_backward_batch_dot", a.Get<BatchDotParam>(), in[1].shape(), in[2].shape());
  const GpuCall call(ctx);
  if (req[0] != OpReq::kNull) {
    RunProduct(call, dtype, plan.grad_a, in[plan.grad_a_inputs[0]].raw(),
               in[plan.grad_a_inputs[1]].raw(), req[0], out[0].raw());
  }
  if (req[1] != OpReq::kNull) {
    RunProduct(call, dtype, plan.grad_b, in[plan.grad_b_inputs[0]].raw(),
               in[plan.grad_b_inputs[1]].raw(), req[1], out[1].raw());
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"batch_dot", {.compute = BatchDotForwardGpu}},
                               {"matmul", {.compute = BatchDotForwardGpu}},
                               {"_backward_batch_dot", {.compute = BatchDotBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
