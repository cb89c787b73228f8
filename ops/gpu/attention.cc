// Attention and _backward_Attention on the GPU (ops/nn/attention.cc says what they compute):
// float32, float64 and bfloat16 data; lse in float32 (float64 for float64 data); an additive or
// boolean mask; q, k, v as three inputs or one packed qkv (read through strides); dropout on the
// probabilities in training, the CPU's mask for the same key (ops/math/attention_dropout.h): the
// forward writes its key (seed, offset plus the graph replay's shift) into the rng output on the
// device, and the backward's kernels read it from there.
//
// bfloat16 calls without a mask or dropout, in either layout (cuDNN reads a packed qkv through
// its strides), go to cuDNN's fused attention first (internal/cudnn_attention.h: plans built
// once per shape and layout, and cached); where cuDNN declines a
// call (an output request it cannot honour, a cuDNN without the engine, a shape it does not
// support), it queues nothing and the call runs weft's own kernels (kernels/attention.cuh), as
// every other call does. Both paths keep the same lse (natural log of the sum of exp of the
// scaled, masked scores), so a backward runs on either path whichever path ran its forward.
// WEFT_GPU_CUDNN_ATTENTION=0 turns cuDNN's path off.
//
// Weft's path, for heads of at most 64 columns in float arithmetic: attention_tiled.cuh's kernels
// (a block per (b, h, 64 rows), 4 x 4 register blocks of scores and outputs per thread), the
// backward's after AttnDelta; for the rest (float64, wider heads) attention.cuh's: forward
// AttnForward, a block per (b, h, 32 queries, column chunk) over the key tiles; backward AttnDelta
// (delta_i = out_grad_i . out_i into the workspace), then AttnQueryGrad (d_q, by query tiles) and
// AttnKeyGrad (d_k and d_v, by key tiles): no atomics, and no Tq x Tk matrix anywhere. Requests:
// each output as its request says (kAddTo accumulates).
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

// One call: its extents, dtype, mask type and the kernels' view of it, and where its operands
// start (q, k and v: three inputs, or parts of one packed qkv).
struct AttnGpuCall {
  AttentionDims d;
  DType dtype;
  std::string mask_type;  // the kernels' M: the data's type, or bytes for a boolean mask
  GpuAttention k;
  bool dense = true;  // q, k, v: three inputs (and three gradients), not parts of one qkv
};

GpuAttnStrides StridesOf(const AttentionRows& r) { return {r.b, r.h, r.t}; }

// The call whose forward inputs (q, k, v | qkv) start at in[first], its mask at in[mask] (-1:
// none).
AttnGpuCall CallOf(const char* op, const Attrs& a, std::span<const TensorView> in, int first,
                   int mask) {
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  std::vector<Shape> shapes;
  for (int i = 0; i < s.operands; ++i) shapes.push_back(in[first + i].shape());
  if (mask >= 0) shapes.push_back(in[mask].shape());
  const DType dtype = in[first].dtype();
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  AttnGpuCall c{AttentionDimsOf(op, p, shapes), dtype, TypeName(dtype), {}};
  if (mask >= 0 && AttentionMaskIsBoolean(in[mask].dtype())) c.mask_type = "unsigned char";
  const AttentionDims& d = c.d;
  c.k = GpuAttention{d.b,
                     d.h,
                     d.tq,
                     d.tk,
                     d.d,
                     d.dv,
                     StridesOf(d.q),
                     StridesOf(d.k),
                     StridesOf(d.v),
                     StridesOf(d.out),
                     {d.mask_stride[0], d.mask_stride[1], d.mask_stride[2], d.mask_stride[3]},
                     d.scale,
                     d.causal ? 1 : 0};
  c.dense = p.layout != AttentionLayout::kBt3hd;
  return c;
}

// Operand `which` (0: q, 1: k, 2: v) of a call whose operands start at in[first]: its input (or
// the packed one), moved to its rows' offset.
const void* Operand(const AttnGpuCall& c, std::span<const TensorView> in, int first, int which) {
  const AttentionRows& rows = which == 0 ? c.d.q : which == 1 ? c.d.k : c.d.v;
  const TensorView& t = in[first + (c.dense ? which : 0)];
  return static_cast<const char*>(t.raw()) + rows.offset * DTypeSize(c.dtype);
}

// The same for gradient `which` among outputs `out` (one packed d_qkv, or three).
void* Gradient(const AttnGpuCall& c, std::span<const TensorView> out, int which) {
  const AttentionRows& rows = which == 0 ? c.d.q : which == 1 ? c.d.k : c.d.v;
  return static_cast<char*>(out[c.dense ? which : 0].raw()) + rows.offset * DTypeSize(c.dtype);
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
             Instance(kernel, {TypeName(c.dtype), ArithName(c.dtype), c.mask_type,
                               std::to_string(per_thread)}),
             AttnItems(c.d.Heads(), rows, cols, per_thread), /*block_per_item=*/true, pointers);
}

// Whether the call runs attention_tiled.cuh's kernels: heads of at most kAtTile columns and float
// arithmetic, unless WEFT_GPU_TILED_ATTENTION=0. On an H100 they take GPT-2's float32 attention
// (B 8, H 12, T 1024, D 64, causal) from 9.21 to 4.90 ms forward and backward (gpu_bench);
// gpu_attention_test runs both paths, tests/attention_kernels_host_test.cc the tiled kernels on
// the host against a float64 reference.
bool Tiled(const AttnGpuCall& c) {
  return c.dtype != DType::kFloat64 && c.d.d <= kAtTile && c.d.dv <= kAtTile &&
         GetEnvBool("WEFT_GPU_TILED_ATTENTION", true);
}

// Launches attention_tiled.cuh's `kernel` for the call's types with `tiles` of dynamic shared
// memory, a block per kAtTile of the `rows` rows of each (b, h) pair.
template <typename... Args>
void LaunchAtTiled(const OpContext& ctx, const AttnGpuCall& c, const char* kernel, int64_t rows,
                   int tiles, Args... args) {
  void* pointers[] = {static_cast<void*>(&args)...};
  LaunchArgs(ctx, "attention_tiled.cuh", Instance(kernel, {TypeName(c.dtype), c.mask_type}),
             c.d.Heads() * ((rows + kAtTile - 1) / kAtTile), /*block_per_item=*/true, pointers,
             static_cast<size_t>(tiles) * kAtTile * kAtTile * sizeof(float));
}

// Whether cuDNN may take this call: bfloat16 or float16, no mask, no dropout (cuDNN's would draw
// another mask), and not turned off. Either layout: cuDNN reads q, k, v and out through their
// strides.
bool CudnnEligible(const AttnGpuCall& c, const GpuAttnDropout& z) {
  return Is16BitFloat(c.dtype) && !c.d.mask && z.p == 0 &&
         GetEnvBool("WEFT_GPU_CUDNN_ATTENTION", true);
}

// The forward's dropout: the op's range in training with p > 0, else none; its key goes to the
// rng output (if requested), with applied 0 outside training.
GpuAttnDropout ForwardDropout(const OpContext& ctx, const AttentionParam& p,
                              const AttentionSlots& s, std::span<const OpReq> req,
                              std::span<const TensorView> out) {
  const bool on = p.p > 0 && ctx.is_train;
  const GpuAttnDropout z{on ? p.p : 0, ctx.random.seed, ctx.random.offset,
                         reinterpret_cast<const unsigned long long*>(ctx.random.shift), nullptr};
  if (s.rng >= 0 && req[s.rng] != OpReq::kNull) {
    Launch(ctx, "attention.cuh", "weft::AttnWriteKey", 1, out[s.rng].data<int64_t>(), z,
           on ? 1 : 0);
  }
  return z;
}

// The backward's: the forward's key, read by the kernels from its rng input (which also says
// whether the forward dropped anything).
GpuAttnDropout BackwardDropout(const AttentionParam& p, const AttentionSlots& s,
                               std::span<const TensorView> in) {
  if (s.rng < 0) return {};
  return {p.p, 0, 0, nullptr, static_cast<const long long*>(in[s.Rng()].raw())};
}

// in: (q, k, v | qkv[, mask]); out: (out, lse[, rng]).
void AttentionForwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                         std::span<const OpReq> req, std::span<const TensorView> out) {
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  const AttnGpuCall c = CallOf("Attention", a, in, 0, s.mask);
  const GpuAttnDropout z = ForwardDropout(ctx, p, s, req, out);
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull) return;
  const GpuCall call(ctx);
  void* o = static_cast<char*>(out[0].raw()) + c.d.out.offset * DTypeSize(c.dtype);
  if (CudnnEligible(c, z) && Writes(req[0]) && req[1] != OpReq::kAddTo) {
    void* lse = req[1] == OpReq::kNull ? nullptr : out[1].raw();
    const CudnnAttentionForwardArgs args{Operand(c, in, 0, 0), Operand(c, in, 0, 1),
                                         Operand(c, in, 0, 2), o, lse};
    if (CudnnAttentionForward(call, c.d, c.dtype, args)) return;
  }
  const void* mask = s.mask >= 0 ? in[s.mask].raw() : nullptr;
  if (Tiled(c)) {
    LaunchAtTiled(ctx, c, "weft::AttnForwardTiled", c.d.tq, 3, Operand(c, in, 0, 0),
                  Operand(c, in, 0, 1), Operand(c, in, 0, 2), mask, o, out[1].raw(), c.k, z,
                  ReqCode(req[0]), ReqCode(req[1]));
    return;
  }
  LaunchTiled(ctx, c, "weft::AttnForward", c.d.tq, c.d.dv, Operand(c, in, 0, 0),
              Operand(c, in, 0, 1), Operand(c, in, 0, 2), mask, o, out[1].raw(), c.k, z,
              ReqCode(req[0]), ReqCode(req[1]));
}

// in: (out_grad, q, k, v | qkv, out, lse[, mask][, rng]) as AttentionSlots places them; out:
// (d_q, d_k, d_v) or d_qkv.
void AttentionBackwardGpu(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req_in, std::span<const TensorView> out) {
  const char* op = "_backward_Attention";
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  const int first = s.Operand(0);
  const AttnGpuCall c = CallOf(op, a, in, first, s.Mask());
  const GpuAttnDropout z = BackwardDropout(p, s, in);
  const int last = s.operands - 1;  // packed: every gradient is a part of output 0
  const OpReq req[3] = {req_in[0], req_in[std::min(1, last)], req_in[last]};
  const bool keys = req[1] != OpReq::kNull || req[2] != OpReq::kNull;
  if (req[0] == OpReq::kNull && !keys) return;
  const GpuCall call(ctx);
  const void *dy = in[s.kOutGrad].raw(), *q = Operand(c, in, first, 0);
  const void *k = Operand(c, in, first, 1), *v = Operand(c, in, first, 2);
  const void* y = static_cast<const char*>(in[s.Out()].raw()) + c.d.out.offset * DTypeSize(c.dtype);
  const void *lse = in[s.Lse()].raw(), *mask = s.Mask() >= 0 ? in[s.Mask()].raw() : nullptr;
  if (CudnnEligible(c, z) && Writes(req[0]) && Writes(req[1]) && Writes(req[2])) {
    const CudnnAttentionBackwardArgs args{
        q, k, v, y, lse, dy, Gradient(c, out, 0), Gradient(c, out, 1), Gradient(c, out, 2)};
    if (CudnnAttentionBackward(call, c.d, c.dtype, args)) return;
  }
  void* delta = call.Workspace({static_cast<size_t>(c.d.Heads() * c.d.tq) * ArithSize(c.dtype)})[0];
  Launch(ctx, "attention.cuh", Instance("weft::AttnDelta", {TypeName(c.dtype), ArithName(c.dtype)}),
         c.d.Heads() * c.d.tq, dy, y, delta, c.k);
  if (Tiled(c)) {
    if (req[0] != OpReq::kNull) {
      LaunchAtTiled(ctx, c, "weft::AttnQueryGradTiled", c.d.tq, 5, dy, q, k, v, mask, lse,
                    static_cast<const void*>(delta), Gradient(c, out, 0), c.k, z, ReqCode(req[0]));
    }
    if (keys) {
      LaunchAtTiled(ctx, c, "weft::AttnKeyGradTiled", c.d.tk, 5, dy, q, k, v, mask, lse,
                    static_cast<const void*>(delta), Gradient(c, out, 1), Gradient(c, out, 2), c.k,
                    z, ReqCode(req[1]), ReqCode(req[2]));
    }
    return;
  }
  if (req[0] != OpReq::kNull) {
    LaunchTiled(ctx, c, "weft::AttnQueryGrad", c.d.tq, c.d.d, dy, q, k, v, mask, lse,
                static_cast<const void*>(delta), Gradient(c, out, 0), c.k, z, ReqCode(req[0]));
  }
  if (!keys) return;
  LaunchTiled(ctx, c, "weft::AttnKeyGrad", c.d.tk, std::max(c.d.d, c.d.dv), dy, q, k, v, mask, lse,
              static_cast<const void*>(delta), Gradient(c, out, 1), Gradient(c, out, 2), c.k, z,
              ReqCode(req[1]), ReqCode(req[2]));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"Attention", {.compute = AttentionForwardGpu}},
                               {"_backward_Attention", {.compute = AttentionBackwardGpu}},
                           });

}  // namespace
}  // namespace weft::gpu
