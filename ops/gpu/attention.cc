// Attention and _backward_Attention on the GPU (ops/nn/attention.cc says what they compute):
// float32, float64 and bfloat16 data; lse in float32 (float64 for float64 data).
//
// bfloat16 calls go to cuDNN's fused attention first (internal/cudnn_attention.h: plans built
// once per shape and cached); where cuDNN declines a call (a mask, an output request it cannot
// honour, a cuDNN without the engine, a shape it does not support), it queues nothing and the
// call runs weft's own kernels (kernels/attention.cuh), as float32 and float64 calls always do.
// Both paths keep the same lse (natural log of the sum of exp of the scaled, masked scores), so
// a backward runs on either path whichever path ran its forward. WEFT_GPU_CUDNN_ATTENTION=0 turns
// cuDNN's path off.
//
// Weft's path: forward AttnForward, a block per (b, h, 32 queries, column chunk) over the key
// tiles; backward AttnDelta (delta_i = out_grad_i . out_i into the workspace), then AttnQueryGrad
// (d_q, by query tiles) and AttnKeyGrad (d_k and d_v, by key tiles): no atomics, and no Tq x Tk
// matrix anywhere. Requests: each output as its request says (kAddTo accumulates).
#include "ops/nn/attention.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "core/env.h"
#include "ops/gpu/internal/cudnn_attention.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/kernels/attention_tiles.cuh"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// _backward_Attention's inputs (ops/nn/attention.cc).
enum BackwardInput { kOutGrad, kQ, kK, kV, kOut, kLse, kMask };

// One call: its extents, dtype and the kernels' view of it.
struct AttnGpuCall {
  AttentionDims d;
  DType dtype;
  GpuAttention k;
};

AttnGpuCall CallOf(const char* op, const Attrs& a, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView* mask) {
  const AttentionParam& p = a.Get<AttentionParam>();
  CheckDType(op, q.dtype(), {DType::kFloat32, DType::kFloat64, DType::kBFloat16});
  AttnGpuCall c{AttentionDimsOf(op, p, q.shape(), k.shape(), v.shape(),
                                p.use_mask ? &mask->shape() : nullptr),
                q.dtype(),
                {}};
  const AttentionDims& d = c.d;
  const long long mask_stride[4] = {d.mask_stride[0], d.mask_stride[1], d.mask_stride[2],
                                    d.mask_stride[3]};
  c.k = AttnDenseCall(d.b, d.h, d.tq, d.tk, d.d, d.dv, mask_stride, d.scale, d.causal);
  return c;
}

// The kernels' arithmetic (and lse) type: double for float64, float otherwise.
std::string ArithName(DType dtype) { return dtype == DType::kFloat64 ? "double" : "float"; }
size_t ArithSize(DType dtype) { return dtype == DType::kFloat64 ? 8 : 4; }

// Launches attention.cuh's `kernel` for the call's types with `per_thread` accumulators per
// thread, a block per work item of AttnItems(B * H, rows, cols, per_thread).
template <typename... Args>
void LaunchTiled(const OpContext& ctx, const AttnGpuCall& c, const char* kernel, int64_t rows,
                 int64_t cols, Args... args) {
  const int per_thread = AttnPerThread(cols);
  void* pointers[] = {static_cast<void*>(&args)...};
  LaunchArgs(ctx, "attention.cuh",
             Instance(kernel, {TypeName(c.dtype), ArithName(c.dtype), std::to_string(per_thread)}),
             AttnItems(c.d.Heads(), rows, cols, per_thread), /*block_per_item=*/true, pointers);
}

// Whether cuDNN may take this call: bfloat16, no mask, and not turned off.
bool CudnnEligible(const AttnGpuCall& c) {
  return c.dtype == DType::kBFloat16 && !c.d.mask && GetEnvBool("WEFT_GPU_CUDNN_ATTENTION", true);
}

// in: (q, k, v[, mask]); out: (out, lse).
void AttentionForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                         std::span<const OpReq> req, std::span<const TensorView> out) {
  const AttnGpuCall c =
      CallOf("Attention", a, in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr);
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull) return;
  const GpuCall call(ctx);
  if (CudnnEligible(c) && Writes(req[0]) && req[1] != OpReq::kAddTo) {
    void* lse = req[1] == OpReq::kNull ? nullptr : out[1].raw();
    const CudnnAttentionForwardArgs args{in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), lse};
    if (CudnnAttentionForward(call, c.d, c.dtype, args)) return;
  }
  const void* mask = c.d.mask ? in[3].raw() : nullptr;
  LaunchTiled(ctx, c, "weft::AttnForward", c.d.tq, c.d.dv, in[0].raw(), in[1].raw(), in[2].raw(),
              mask, out[0].raw(), out[1].raw(), c.k, ReqCode(req[0]), ReqCode(req[1]));
}

// in: as BackwardInput places them; out: (d_q, d_k, d_v).
void AttentionBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  const AttnGpuCall c = CallOf("_backward_Attention", a, in[kQ], in[kK], in[kV],
                               in.size() > kMask ? &in[kMask] : nullptr);
  const bool keys = req[1] != OpReq::kNull || req[2] != OpReq::kNull;
  if (req[0] == OpReq::kNull && !keys) return;
  const GpuCall call(ctx);
  if (CudnnEligible(c) && Writes(req[0]) && Writes(req[1]) && Writes(req[2])) {
    const CudnnAttentionBackwardArgs args{in[kQ].raw(),   in[kK].raw(),   in[kV].raw(),
                                          in[kOut].raw(), in[kLse].raw(), in[kOutGrad].raw(),
                                          out[0].raw(),   out[1].raw(),   out[2].raw()};
    if (CudnnAttentionBackward(call, c.d, c.dtype, args)) return;
  }
  const int64_t rows = c.d.Heads() * c.d.tq;
  void* delta = call.Workspace({static_cast<size_t>(rows) * ArithSize(c.dtype)})[0];
  const void *dy = in[kOutGrad].raw(), *q = in[kQ].raw(), *k = in[kK].raw(), *v = in[kV].raw();
  const void *lse = in[kLse].raw(), *mask = c.d.mask ? in[kMask].raw() : nullptr;
  Launch(ctx, "attention.cuh", Instance("weft::AttnDelta", {TypeName(c.dtype), ArithName(c.dtype)}),
         rows, dy, in[kOut].raw(), delta, rows, c.d.dv);
  if (req[0] != OpReq::kNull) {
    LaunchTiled(ctx, c, "weft::AttnQueryGrad", c.d.tq, c.d.d, dy, q, k, v, mask, lse,
                static_cast<const void*>(delta), out[0].raw(), c.k, ReqCode(req[0]));
  }
  if (!keys) return;
  LaunchTiled(ctx, c, "weft::AttnKeyGrad", c.d.tk, std::max(c.d.d, c.d.dv), dy, q, k, v, mask, lse,
              static_cast<const void*>(delta), out[1].raw(), out[2].raw(), c.k, ReqCode(req[1]),
              ReqCode(req[2]));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Attention", {.compute = AttentionForwardGpu}},
                               {"_backward_Attention", {.compute = AttentionBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
