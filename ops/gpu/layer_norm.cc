// LayerNorm and _backward_LayerNorm on the GPU (ops/nn/layer_norm.cc says what they compute), on
// weft's kernels (kernels/layer_norm.cuh): float32 and bfloat16 data, float32 statistics, scale
// and shift. float64 is the CPU's (its loops exist for finite differences).
//
// Forward: LnForward, a block a row: the row's mean and variance (two passes over the row, which
// the second pass reads from cache), then y; mean and rstd as their requests say.
// Backward: LnBackward, a block a row as well: d_data from the row's two sums, and each block's
// partial sums of the parameter gradients (a float per value of C for each of at most
// kMaxPartialBlocks blocks, in the workspace); then the column sums of those (SumRowsGpu) add the
// blocks' sums in a fixed order (deterministic: no atomics) into d_gamma and d_beta as requested.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/reduce.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// Blocks of the backward (each keeps 2 * C partial sums): enough to fill an H200 (132 SMs) and
// at most 2^24 partial sums of each parameter.
constexpr int64_t kMaxPartialBlocks = 1024;
constexpr int64_t kMaxPartials = int64_t{1} << 24;

struct LnGpuCall {
  LayerNormParam p;
  LnDims d;
  DType dtype;
};

LnGpuCall CallOf(const char* op, const Attrs& a, const TensorView& data) {
  const LayerNormParam& p = a.Get<LayerNormParam>();
  CheckDType(op, data.dtype(), {DType::kFloat32, DType::kBFloat16});
  return {p, LnDimsOf(op, p, data.shape()), data.dtype()};
}

// Launches `kernel` of layer_norm.cuh for T = the data's type, with `blocks` blocks.
template <typename... Args>
void LaunchLn(const OpContext& ctx, const LnGpuCall& c, const char* kernel, int64_t blocks,
              Args... args) {
  void* pointers[] = {static_cast<void*>(&args)...};
  LaunchArgs(ctx, "layer_norm.cuh", Instance(kernel, {TypeName(c.dtype)}), blocks,
             /*block_per_item=*/true, pointers);
}

// in: (data, gamma, beta); out: (output, mean, rstd).
void LnForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnGpuCall c = CallOf("LayerNorm", a, in[0]);
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull && req[2] == OpReq::kNull) return;
  const GpuCall call(ctx);
  const int64_t rows = c.d.Rows();
  LaunchLn(ctx, c, "weft::LnForward", rows, in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(),
           out[1].raw(), out[2].raw(), rows, c.d.c, c.d.inner, static_cast<float>(c.p.eps),
           ReqCode(req[0]), ReqCode(req[1]), ReqCode(req[2]));
}

// The backward's blocks: one a row up to the caps.
int64_t BackwardBlocks(const LnDims& d) {
  return std::max<int64_t>(1, std::min({d.Rows(), kMaxPartialBlocks, kMaxPartials / d.c}));
}

// in: as LnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void LnBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnGpuCall c = CallOf("_backward_LayerNorm", a, in[kLnData]);
  const bool params = req[1] != OpReq::kNull || req[2] != OpReq::kNull;
  if (req[0] == OpReq::kNull && !params) return;
  const GpuCall call(ctx);
  const int64_t blocks = BackwardBlocks(c.d);
  const size_t partial_bytes = params ? blocks * c.d.c * sizeof(float) : 0;
  const std::vector<void*> ws = call.Workspace({partial_bytes, partial_bytes});
  LaunchLn(ctx, c, "weft::LnBackward", blocks, in[kLnOutGrad].raw(), in[kLnData].raw(),
           in[kLnGamma].raw(), in[kLnMean].raw(), in[kLnRstd].raw(), out[0].raw(), ws[0], ws[1],
           c.d.Rows(), c.d.c, c.d.inner, ReqCode(req[0]));
  if (!params) return;
  for (int k : {0, 1}) {  // d_gamma, d_beta: the partials' column sums, in block order
    const TensorView partial(ws[k], Shape{blocks, c.d.c}, DType::kFloat32, ctx.run.device);
    SumRowsGpu(ctx, partial, req[1 + k], out[1 + k], /*workspace=*/false);
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"LayerNorm", {.compute = LnForwardGpu}},
                               {"_backward_LayerNorm", {.compute = LnBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
