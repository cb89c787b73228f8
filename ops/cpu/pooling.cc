// CPU compute of Pooling and _backward_Pooling (ops/nn/pooling.cc defines them and says what they
// compute): oneDNN's pooling on float32 (avg as pooling_avg_include_padding), the loops below on
// float64. Max pooling's gradient goes to the first largest input on ties, in the float64 loops.
//
// oneDNN's max-pooling backward needs the workspace its forward-training pass fills; rather than
// keep that workspace as a hidden second output of Pooling (which every user and graph pass would
// then see), the backward recomputes the forward into scratch: one extra forward pass per backward.
#include <algorithm>
#include <limits>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

bool IsMax(const PoolCall& call) { return call.type == PoolType::kMax; }

// ---- float32: oneDNN pooling ----

dnnl::pooling_forward::primitive_desc PoolForwardDesc(const Window2d& win, const Geometry2d& g,
                                                      bool max, dnnl::prop_kind kind) {
  const dnnl::pooling_forward::desc desc(
      kind, max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding,
      PlainDesc(Shape{g.n, g.c, g.h, g.w}), PlainDesc(PoolOutputShape(g)),
      {win.stride[0], win.stride[1]}, {win.kernel[0], win.kernel[1]}, {win.pad[0], win.pad[1]},
      {win.pad[0], win.pad[1]});
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

std::string PoolKey(const char* direction, const Window2d& win, const Geometry2d& g, bool max) {
  return PrimitiveKey("Pooling", direction, max ? "max" : "avg", Shape{g.n, g.c, g.h, g.w},
                      win.kernel[0], win.kernel[1], win.stride[0], win.stride[1], win.pad[0],
                      win.pad[1]);
}

// Inference needs no workspace; training fills the workspace max pooling's backward reads.
DnnlPrimitive PoolForwardPrimitive(const Window2d& win, const Geometry2d& g, bool max,
                                   bool training) {
  const auto kind =
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  return CachedPrimitive(
      PoolKey(training ? "forward_training" : "forward_inference", win, g, max),
      [&] { return MakePrimitive<dnnl::pooling_forward>(PoolForwardDesc(win, g, max, kind)); });
}

DnnlPrimitive PoolBackwardPrimitive(const Window2d& win, const Geometry2d& g, bool max) {
  return CachedPrimitive(PoolKey("backward", win, g, max), [&] {
    const dnnl::pooling_backward::desc desc(
        max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding,
        PlainDesc(Shape{g.n, g.c, g.h, g.w}), PlainDesc(PoolOutputShape(g)),
        {win.stride[0], win.stride[1]}, {win.kernel[0], win.kernel[1]}, {win.pad[0], win.pad[1]},
        {win.pad[0], win.pad[1]});
    return MakePrimitive<dnnl::pooling_backward>(
        {desc, ScratchpadAttr(), DnnlEngine(),
         PoolForwardDesc(win, g, max, dnnl::prop_kind::forward_training)});
  });
}

// dy (N, C, OH, OW) -> dx (N, C, H, W). Max pooling runs the forward first, for its workspace.
void PoolBackwardF32(const OpContext& ctx, const PoolCall& call, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const DnnlPrimitive backward = PoolBackwardPrimitive(call.win, call.g, IsMax(call));
  if (!IsMax(call)) {
    StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(backward)});
    ExecutePrimitive(
        backward,
        {{DNNL_ARG_DIFF_DST, DnnlMemory(in[0])}, {DNNL_ARG_DIFF_SRC, DnnlMemory(staged.Target(0))}},
        staged.Extra(0));
    staged.Finish();
    return;
  }
  const DnnlPrimitive forward = PoolForwardPrimitive(call.win, call.g, true, true);
  StagedOutputs staged(ctx, req, out, false,
                       {in[0].bytes(), WorkspaceBytes(forward),
                        std::max(ScratchpadBytes(forward), ScratchpadBytes(backward))});
  const dnnl::memory workspace(forward.desc.workspace_desc(), DnnlEngine(), staged.Extra(1));
  const TensorView forward_output(staged.Extra(0), in[0].shape(), DType::kFloat32, in[0].device());
  ExecutePrimitive(forward,
                   {{DNNL_ARG_SRC, DnnlMemory(in[1])},
                    {DNNL_ARG_DST, DnnlMemory(forward_output)},
                    {DNNL_ARG_WORKSPACE, workspace}},
                   staged.Extra(2));
  ExecutePrimitive(backward,
                   {{DNNL_ARG_DIFF_DST, DnnlMemory(in[0])},
                    {DNNL_ARG_DIFF_SRC, DnnlMemory(staged.Target(0))},
                    {DNNL_ARG_WORKSPACE, workspace}},
                   staged.Extra(2));
  staged.Finish();
}

// ---- float64: loops ----

// x (N, C, H, W) -> y (N, C, OH, OW).
template <typename T>
void PoolForwardLoops(const Window2d& win, const Geometry2d& g, bool max, const T* x, T* y) {
  const T area = static_cast<T>(win.kernel[0] * win.kernel[1]);
  ParallelFor(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * g.h * g.w;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          T acc = max ? -std::numeric_limits<T>::infinity() : T(0);
          ForEachTap(win, g, oh, ow, [&](int64_t, int64_t, int64_t at) {
            acc = max ? std::max(acc, xp[at]) : acc + xp[at];
          });
          y[(plane * g.oh + oh) * g.ow + ow] = max ? acc : acc / area;
        }
      }
    }
  });
}

// dy (N, C, OH, OW), x (N, C, H, W) -> dx (N, C, H, W).
template <typename T>
void PoolBackwardLoops(const Window2d& win, const Geometry2d& g, bool max, const T* dy, const T* x,
                       T* dx) {
  const T area = static_cast<T>(win.kernel[0] * win.kernel[1]);
  ParallelFor(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * g.h * g.w;
      T* dxp = dx + plane * g.h * g.w;
      std::fill_n(dxp, g.h * g.w, T(0));
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const T grad = dy[(plane * g.oh + oh) * g.ow + ow];
          int64_t best = -1;  // max: the first largest tap
          ForEachTap(win, g, oh, ow, [&](int64_t, int64_t, int64_t at) {
            if (!max) {
              dxp[at] += grad / area;
            } else if (best < 0 || xp[at] > xp[best]) {
              best = at;
            }
          });
          if (max) dxp[best] += grad;
        }
      }
    }
  });
}

// ---- compute ----

// in: (data); out: (output).
void PoolForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall call = PoolCallOf(a, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  if (!UseDnnl(in[0].dtype(), "Pooling")) {
    StagedOutputs staged(ctx, req, out, false);
    PoolForwardLoops<double>(call.win, call.g, IsMax(call), in[0].data<double>(),
                             staged.Target(0).data<double>());
    staged.Finish();
    return;
  }
  const DnnlPrimitive prim = PoolForwardPrimitive(call.win, call.g, IsMax(call), false);
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim)});
  ExecutePrimitive(
      prim, {{DNNL_ARG_SRC, DnnlMemory(in[0])}, {DNNL_ARG_DST, DnnlMemory(staged.Target(0))}},
      staged.Extra(0));
  staged.Finish();
}

// in: (out_grad, data); out: (d_data).
void PoolBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall call = PoolCallOf(a, in[1].shape());
  if (req[0] == OpReq::kNull) return;
  if (UseDnnl(in[0].dtype(), "_backward_Pooling")) return PoolBackwardF32(ctx, call, in, req, out);
  StagedOutputs staged(ctx, req, out, false);
  PoolBackwardLoops<double>(call.win, call.g, IsMax(call), in[0].data<double>(),
                            in[1].data<double>(), staged.Target(0).data<double>());
  staged.Finish();
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"Pooling", {.compute = PoolForward}},
                                                 {"_backward_Pooling", {.compute = PoolBackward}},
                                             });

}  // namespace
}  // namespace weft::cpu
