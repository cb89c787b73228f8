// CPU compute of Pooling and _backward_Pooling (ops/nn/pooling.cc defines them and says what they
// compute): oneDNN's pooling on float32, the loops below on float64 and bfloat16 (computing in
// float, each output rounded once, as the GPU's kernels; the loops write each output once, as its
// request says, so no output is staged). Max pooling's gradient goes to the first largest input
// on ties, in the loops.
//
// oneDNN takes the padding after the input explicitly (window2d.h's PadAfter: more than `pad` in
// ceil mode where the last window reaches past the padding). Its avg_include_padding then counts
// that extra padding too (it divides by kh * kw), where Pooling does not (pool_window.h's Count):
// such calls (avg, count_include_pad, a window reaching past the padding) run the loops on
// float32 too.
//
// oneDNN's max-pooling backward needs the workspace its forward-training pass fills; rather than
// keep that workspace as a hidden second output of Pooling (which every user and graph pass would
// then see), the backward recomputes the forward into scratch: one extra forward pass per backward.
//
// Layouts NHWC and NCHW16c: oneDNN reads and writes channels-last and blocked tensors in place
// (ImageMemory); the loops step through any layout (PlaneStrides).
#include <algorithm>
#include <limits>
#include <vector>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/math/pool_window.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

bool IsMax(const PoolCall& call) { return call.type == PoolType::kMax; }

// ---- float32: oneDNN pooling ----

dnnl::algorithm AlgorithmOf(const PoolCall& call) {
  if (IsMax(call)) return dnnl::algorithm::pooling_max;
  return call.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                : dnnl::algorithm::pooling_avg_exclude_padding;
}

// What a pooling descriptor takes besides the algorithm and the direction.
struct PoolDescArgs {
  dnnl::memory::desc src, dst;
  dnnl::memory::dims strides, kernel, pad_before, pad_after;
};

PoolDescArgs DescArgsOf(const PoolCall& call) {
  const Window2d& win = call.win;
  const Geometry2d& g = call.g;
  return {ImageDesc(Shape{g.n, g.c, g.h, g.w}, win, DType::kFloat32),
          ImageDesc(Shape{g.n, g.c, g.oh, g.ow}, win, DType::kFloat32),
          {win.stride[0], win.stride[1]},
          {win.kernel[0], win.kernel[1]},
          {win.pad[0], win.pad[1]},
          {PadAfter(win, g, 0), PadAfter(win, g, 1)}};
}

dnnl::pooling_forward::primitive_desc PoolForwardDesc(const PoolCall& call, dnnl::prop_kind kind) {
  const PoolDescArgs d = DescArgsOf(call);
  const dnnl::pooling_forward::desc desc(kind, AlgorithmOf(call), d.src, d.dst, d.strides, d.kernel,
                                         d.pad_before, d.pad_after);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

std::string PoolKey(const char* direction, const PoolCall& call) {
  const Window2d& win = call.win;
  const Geometry2d& g = call.g;
  return PrimitiveKey("Pooling", direction, static_cast<int>(AlgorithmOf(call)),
                      Shape{g.n, g.c, g.h, g.w}, win.kernel[0], win.kernel[1], win.stride[0],
                      win.stride[1], win.pad[0], win.pad[1], PadAfter(win, g, 0),
                      PadAfter(win, g, 1), g.channels_last, g.blocked);
}

// Inference needs no workspace; training fills the workspace max pooling's backward reads.
DnnlPrimitive PoolForwardPrimitive(const PoolCall& call, bool training) {
  const auto kind =
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  return CachedPrimitive(PoolKey(training ? "forward_training" : "forward_inference", call), [&] {
    return MakePrimitive<dnnl::pooling_forward>(PoolForwardDesc(call, kind));
  });
}

DnnlPrimitive PoolBackwardPrimitive(const PoolCall& call) {
  return CachedPrimitive(PoolKey("backward", call), [&] {
    const PoolDescArgs d = DescArgsOf(call);
    const dnnl::pooling_backward::desc desc(AlgorithmOf(call), d.src, d.dst, d.strides, d.kernel,
                                            d.pad_before, d.pad_after);
    return MakePrimitive<dnnl::pooling_backward>(
        {desc, ScratchpadAttr(), DnnlEngine(),
         PoolForwardDesc(call, dnnl::prop_kind::forward_training)});
  });
}

// dy (N, C, OH, OW) -> dx (N, C, H, W). Max pooling runs the forward first, for its workspace.
void PoolBackwardF32(const OpContext& ctx, const PoolCall& call, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  const DnnlPrimitive backward = PoolBackwardPrimitive(call);
  if (!IsMax(call)) {
    StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(backward)});
    ExecutePrimitive(backward,
                     {{DNNL_ARG_DIFF_DST, ImageMemory(in[0], call.win)},
                      {DNNL_ARG_DIFF_SRC, ImageMemory(staged.Target(0), call.win)}},
                     staged.Extra(0));
    staged.Finish();
    return;
  }
  const DnnlPrimitive forward = PoolForwardPrimitive(call, true);
  StagedOutputs staged(ctx, req, out, false,
                       {in[0].bytes(), WorkspaceBytes(forward),
                        std::max(ScratchpadBytes(forward), ScratchpadBytes(backward))});
  const dnnl::memory workspace(forward.desc.workspace_desc(), DnnlEngine(), staged.Extra(1));
  const TensorView forward_output(staged.Extra(0), in[0].shape(), DType::kFloat32, in[0].device());
  ExecutePrimitive(forward,
                   {{DNNL_ARG_SRC, ImageMemory(in[1], call.win)},
                    {DNNL_ARG_DST, ImageMemory(forward_output, call.win)},
                    {DNNL_ARG_WORKSPACE, workspace}},
                   staged.Extra(2));
  ExecutePrimitive(backward,
                   {{DNNL_ARG_DIFF_DST, ImageMemory(in[0], call.win)},
                    {DNNL_ARG_DIFF_SRC, ImageMemory(staged.Target(0), call.win)},
                    {DNNL_ARG_WORKSPACE, workspace}},
                   staged.Extra(2));
  staged.Finish();
}

// ---- loops: float64, bfloat16, and float32 where oneDNN counts otherwise ----

// The window of output (oh, ow) of a call, through pool_window.h.
class LoopWindow {
 public:
  explicit LoopWindow(const PoolCall& call)
      : rows_{call.g.h, call.win.kernel[0], call.win.stride[0], call.win.pad[0]},
        cols_{call.g.w, call.win.kernel[1], call.win.stride[1], call.win.pad[1]},
        include_pad_(call.count_include_pad) {}

  // Calls f(offset) for each input position under the window, row-major; offset = row * w + col.
  template <typename F>
  void ForEachInput(int64_t oh, int64_t ow, F&& f) const {
    const pool::Span r = pool::Inside(rows_, oh), c = pool::Inside(cols_, ow);
    for (int64_t row = r.begin; row < r.end; ++row) {
      for (int64_t col = c.begin; col < c.end; ++col) f(row * cols_.size + col);
    }
  }
  // What an average divides by.
  double Divisor(int64_t oh, int64_t ow) const {
    return static_cast<double>(pool::Count(rows_, oh, include_pad_) *
                               pool::Count(cols_, ow, include_pad_));
  }

 private:
  pool::Axis rows_, cols_;
  bool include_pad_;
};

// x (N, C, H, W) -> y (N, C, OH, OW), in either layout, stored as `req` says. Computed in
// ArithOf<T> (float for bfloat16), each output rounded once.
template <typename T>
void PoolForwardLoops(const PoolCall& call, const T* x, OpReq req, T* y) {
  using A = ArithOf<T>;
  const Geometry2d& g = call.g;
  const LoopWindow window(call);
  const bool max = IsMax(call);
  const PlaneStrides xs = g.DataStrides(), ys = g.OutStrides(g.c);
  ParallelFor(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.c, c = plane % g.c;
      const T* xp = x + xs.At(n, c, 0);
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          A acc = max ? -std::numeric_limits<A>::infinity() : A(0);
          window.ForEachInput(oh, ow, [&](int64_t at) {
            const A v = ToArith(xp[at * xs.step]);
            acc = max ? std::max(acc, v) : acc + v;
          });
          StoreArith(y[ys.At(n, c, oh * g.ow + ow)], req,
                     max ? acc : acc / static_cast<A>(window.Divisor(oh, ow)));
        }
      }
    }
  });
}

// One plane's gradient into `sum` (H * W, row-major), in ArithOf<T>: windows overlap, so an
// input's gradient is a sum. dy and x: the plane's out_grad and data, elements `ys` and `xs`
// apart.
template <typename T>
void PlaneGradient(const PoolCall& call, const T* dy, int64_t ys, const T* x, int64_t xs,
                   std::vector<ArithOf<T>>& sum) {
  using A = ArithOf<T>;
  const LoopWindow window(call);
  const bool max = IsMax(call);
  std::fill(sum.begin(), sum.end(), A(0));
  for (int64_t oh = 0; oh < call.g.oh; ++oh) {
    for (int64_t ow = 0; ow < call.g.ow; ++ow) {
      const A grad = ToArith(dy[(oh * call.g.ow + ow) * ys]);
      const A share = max ? A(0) : grad / static_cast<A>(window.Divisor(oh, ow));
      int64_t best = -1;  // max: the first largest input
      window.ForEachInput(oh, ow, [&](int64_t at) {
        if (!max) {
          sum[at] += share;
        } else if (best < 0 || ToArith(x[at * xs]) > ToArith(x[best * xs])) {
          best = at;
        }
      });
      if (max) sum[best] += grad;
    }
  }
}

// dy (N, C, OH, OW), x (N, C, H, W) -> dx (N, C, H, W), in either layout, stored as `req` says,
// each element rounded once.
template <typename T>
void PoolBackwardLoops(const PoolCall& call, const T* dy, const T* x, OpReq req, T* dx) {
  const Geometry2d& g = call.g;
  const PlaneStrides xs = g.DataStrides(), ys = g.OutStrides(g.c);
  ParallelFor(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    std::vector<ArithOf<T>> sum(static_cast<size_t>(g.h * g.w));
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / g.c, c = plane % g.c;
      PlaneGradient(call, dy + ys.At(n, c, 0), ys.step, x + xs.At(n, c, 0), xs.step, sum);
      T* dxp = dx + xs.At(n, c, 0);
      for (int64_t at = 0; at < g.h * g.w; ++at) StoreArith(dxp[at * xs.step], req, sum[at]);
    }
  });
}

// Whether the loops compute the call: float64, bfloat16 (in float, one rounding per output, as
// on the GPU), and float32 where oneDNN counts otherwise (see the top).
bool UseLoops(const PoolCall& call, DType dtype, const char* op) {
  if (!UseDnnl(dtype, op, /*bfloat16=*/true) || dtype == DType::kBFloat16) return true;
  return !IsMax(call) && call.count_include_pad && Overhangs(call.win, call.g);
}

// ---- compute ----

// in: (data); out: (output).
void PoolForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall call = PoolCallOf(a, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  if (UseLoops(call, in[0].dtype(), "Pooling")) {
    WEFT_FLOAT_BF16_SWITCH(in[0].dtype(), T, "Pooling",
                           PoolForwardLoops<T>(call, in[0].data<T>(), req[0], out[0].data<T>()));
    return;
  }
  const DnnlPrimitive prim = PoolForwardPrimitive(call, false);
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim)});
  ExecutePrimitive(prim,
                   {{DNNL_ARG_SRC, ImageMemory(in[0], call.win)},
                    {DNNL_ARG_DST, ImageMemory(staged.Target(0), call.win)}},
                   staged.Extra(0));
  staged.Finish();
}

// in: (out_grad, data); out: (d_data).
void PoolBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const PoolCall call = PoolCallOf(a, in[1].shape());
  if (req[0] == OpReq::kNull) return;
  if (!UseLoops(call, in[0].dtype(), "_backward_Pooling"))
    return PoolBackwardF32(ctx, call, in, req, out);
  WEFT_FLOAT_BF16_SWITCH(
      in[0].dtype(), T, "_backward_Pooling",
      PoolBackwardLoops<T>(call, in[0].data<T>(), in[1].data<T>(), req[0], out[0].data<T>()));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"Pooling", {.compute = PoolForward}},
                                                 {"_backward_Pooling", {.compute = PoolBackward}},
                                             });

}  // namespace
}  // namespace weft::cpu
