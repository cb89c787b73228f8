// CPU compute of Convolution and _backward_Convolution (ops/nn/convolution.cc defines them and
// says what they compute), and of _conv_depthwise (ops/nn/conv_depthwise.cc: float32 only).
// float32 and bfloat16 run oneDNN's convolution (forward, backward data, backward weights; grouped
// through oneDNN's 5-D weights, dilated); bfloat16 data, weight and bias accumulate in float32 and
// each result is rounded once, a bfloat16 output added to included (ConvTypes says how). float64
// runs the direct loops below.
// Other dtypes are an error naming the op and the dtype (UseDnnl). An activation epilogue
// (act_type) is the forward primitive's post-op, or weft's functor on float64.
// Layout NHWC: oneDNN's channels-last kernels read and write the tensors in place (as fast as its
// blocked layouts here, with no reorder); the loops step through either layout (PlaneStrides).
// Layout NCHW16c: the blocked images are oneDNN's nChw16c, which its kernels take as they lie; the
// loops step through them too (PlaneStrides' blocks).
// with_sum: oneDNN's sum post-op adds what the destination holds, so `sum` is put there first
// (nothing to do when the output shares its buffer); the loops add it after the convolution.
#include <algorithm>
#include <optional>
#include <string>

#include "core/env.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/cpu/internal/layer_util.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// ---- float32 and bfloat16: oneDNN convolution ----

// The dtypes of a primitive's tensors, by their forward names (backward data writes src as
// d_data; backward weights writes weights and bias as d_weight and d_bias): the data's, float32
// or bfloat16, but for what it writes, which StagedType makes float32 for a bfloat16 output added
// to (oneDNN's bfloat16 convolutions write either); Finish then adds in float and rounds once.
// (Not oneDNN's sum post-op, which would add before the activation epilogue, is the with_sum
// input's already, and has no backward form.)
struct ConvTypes {
  DType src, weights, bias, dst;
  static ConvTypes All(DType t) { return {t, t, t, t}; }
};

// The plain descriptors of one call: data, weight, bias, output, and the window (oneDNN's dilation
// counts the positions skipped between taps: dilate - 1). The padding after the input is `pad`
// too: oneDNN's own shape check divides with floor, as the output extent here does.
struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;
  dnnl::memory::dims strides, dilates, padding;
};

// The weight's descriptor, and NCHW data's and output's, leave the layout to oneDNN
// (format_tag::any): on plain NCHW it falls back to im2col + GEMM, while its direct kernels want
// blocked layouts. The tensors are reordered in and out (LayoutBuffer), which costs far less than
// it saves (and three times less again with layout NHWC, which needs no reorder: bench/README.md).
dnnl::memory::desc AnyLayout(const Shape& shape, DType dtype) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.dims().begin(), shape.dims().end()),
                            DnnlType(dtype), dnnl::memory::format_tag::any);
}

// Data or output (dims `nchw`) as the primitive takes it: where it lies for layouts NHWC and
// NCHW16c (blocked images: the layout its kernels take, so nothing is reordered), oneDNN's choice
// for NCHW. `placed`: whether a blocked window's images are taken as they lie (PlacedImages).
dnnl::memory::desc ImageLayout(const Shape& nchw, const Window2d& win, DType dtype, bool placed) {
  return win.channels_last || (win.blocked && placed) ? ImageDesc(nchw, win, dtype)
                                                      : AnyLayout(nchw, dtype);
}

// A blocked window's data and output are taken as they lie where both are blocked, and by the
// forward where one is NCHW (a stem's 1 or 3 channels, 8 channels): its direct kernel reads them,
// where Winograd would pad them to 16 channels. The backward there leaves both to oneDNN: beside a
// blocked gradient it has no kernel for an NCHW one and ran its reference loops (the weight
// gradient of a 3x3 stride-2 convolution from 8 to 16 channels at batch 32: 24 ms a step, 0.1 ms
// on the nChw8c images it picks).
bool PlacedImages(const Window2d& win, const ConvDims& d, bool forward) {
  return forward || (Nchw16c(Shape{d.g.n, d.g.c, d.g.h, d.g.w}, win) &&
                     Nchw16c(Shape{d.g.n, d.f, d.g.oh, d.g.ow}, win));
}

// The weight as oneDNN takes it: (F, C, kh, kw), or with groups (G, F / G, C / G, kh, kw), the
// same memory as weft's (F, C / G, kh, kw).
Shape DnnlWeightShape(const Window2d& win, const ConvDims& d) {
  const Shape w = d.Weight(win);
  if (d.groups == 1) return w;
  return Shape{d.groups, d.f / d.groups, w[1], w[2], w[3]};
}

// A weight tensor (or its gradient) seen in DnnlWeightShape.
TensorView DnnlWeightView(const TensorView& w, const Window2d& win, const ConvDims& d) {
  return w.Reshaped(DnnlWeightShape(win, d));
}

ConvDescs DescsOf(const Window2d& win, const ConvDims& d, const ConvTypes& t, bool forward) {
  const bool placed = PlacedImages(win, d, forward);
  return {ImageLayout(Shape{d.g.n, d.g.c, d.g.h, d.g.w}, win, t.src, placed),
          AnyLayout(DnnlWeightShape(win, d), t.weights),
          PlainDesc(Shape{d.f}, t.bias),
          ImageLayout(Shape{d.g.n, d.f, d.g.oh, d.g.ow}, win, t.dst, placed),
          {win.stride[0], win.stride[1]},
          {win.dilate[0] - 1, win.dilate[1] - 1},
          {win.pad[0], win.pad[1]}};
}

// Everything a convolution primitive depends on, for the cache key.
std::string ConvKey(const char* direction, const Window2d& win, const ConvDims& d, bool bias,
                    const ConvTypes& t, std::optional<ActType> act = std::nullopt,
                    bool sum = false) {
  return PrimitiveKey("Convolution", direction, Shape{d.g.n, d.g.c, d.g.h, d.g.w}, d.f, d.groups,
                      win.kernel[0], win.kernel[1], win.stride[0], win.stride[1], win.pad[0],
                      win.pad[1], win.dilate[0], win.dilate[1], win.channels_last, win.blocked,
                      bias, LayerActKey(act), sum, t.src, t.weights, t.bias, t.dst);
}

// The forward's and the data gradient's algorithm: oneDNN's choice (convolution_auto), which takes
// Winograd (F(4x4, 3x3), jit_wino_4x3 on AVX-512) for float32 3x3 convolutions of stride 1 where
// it expects a gain, direct otherwise (bfloat16 has no Winograd). ResNet-18's CIFAR training step
// (bench/resnet_bench, 2 threads): 0.58x -> 0.43x PyTorch's time, peak memory +79 MB (the tiles'
// scratchpad, about 53 MB, in a workspace then grown by half again; storage/workspace.h). The
// weight gradient stays direct: Winograd there cost 112 MB more scratchpad for little time.
// WEFT_CPU_WINOGRAD=0: direct everywhere (less memory).
dnnl::algorithm WinogradOrDirect() {
  static const bool winograd = GetEnvBool("WEFT_CPU_WINOGRAD", true);
  return winograd ? dnnl::algorithm::convolution_auto : dnnl::algorithm::convolution_direct;
}

// The forward with `attr`'s post-ops.
dnnl::convolution_forward::primitive_desc ConvForwardDescWith(const Window2d& win,
                                                              const ConvDims& d, bool bias,
                                                              const ConvTypes& t,
                                                              const dnnl::primitive_attr& attr) {
  using Desc = dnnl::convolution_forward::desc;
  const ConvDescs m = DescsOf(win, d, t, /*forward=*/true);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = WinogradOrDirect();
  const Desc desc =
      bias ? Desc(kind, algo, m.src, m.weights, m.bias, m.dst, m.strides, m.dilates, m.padding,
                  m.padding)
           : Desc(kind, algo, m.src, m.weights, m.dst, m.strides, m.dilates, m.padding, m.padding);
  return {desc, attr, DnnlEngine()};
}

// The forward on data of dtype `t`, what the backward primitives are made for (their hint).
dnnl::convolution_forward::primitive_desc ConvForwardHint(const Window2d& win, const ConvDims& d,
                                                          bool bias, DType t) {
  return ConvForwardDescWith(win, d, bias, ConvTypes::All(t), ScratchpadAttr());
}

// The forward, with a sum and an activation epilogue `act` as its post-ops.
DnnlPrimitive ConvForwardPrimitive(const Window2d& win, const ConvDims& d, bool bias,
                                   std::optional<ActType> act, bool sum, const ConvTypes& t) {
  return CachedPrimitive(ConvKey("forward", win, d, bias, t, act, sum), [&] {
    return MakePrimitive<dnnl::convolution_forward>(
        ConvForwardDescWith(win, d, bias, t, LayerAttr(act, sum)));
  });
}

// t.src: d_data's dtype; t.weights: the data's.
DnnlPrimitive ConvBackwardDataPrimitive(const Window2d& win, const ConvDims& d,
                                        const ConvTypes& t) {
  return CachedPrimitive(ConvKey("backward_data", win, d, false, t), [&] {
    const ConvDescs m = DescsOf(win, d, t, /*forward=*/false);
    const dnnl::convolution_backward_data::desc desc(WinogradOrDirect(), m.src, m.weights, m.dst,
                                                     m.strides, m.dilates, m.padding, m.padding);
    return MakePrimitive<dnnl::convolution_backward_data>(
        {desc, ScratchpadAttr(), DnnlEngine(), ConvForwardHint(win, d, false, t.weights)});
  });
}

// t.weights, t.bias: d_weight's and d_bias's dtypes; t.src: the data's.
DnnlPrimitive ConvBackwardWeightsPrimitive(const Window2d& win, const ConvDims& d, bool bias,
                                           const ConvTypes& t) {
  return CachedPrimitive(ConvKey("backward_weights", win, d, bias, t), [&] {
    using Desc = dnnl::convolution_backward_weights::desc;
    const ConvDescs m = DescsOf(win, d, t, /*forward=*/false);
    const auto algo = dnnl::algorithm::convolution_direct;  // WinogradOrDirect says why
    const Desc desc =
        bias ? Desc(algo, m.src, m.weights, m.bias, m.dst, m.strides, m.dilates, m.padding,
                    m.padding)
             : Desc(algo, m.src, m.weights, m.dst, m.strides, m.dilates, m.padding, m.padding);
    return MakePrimitive<dnnl::convolution_backward_weights>(
        {desc, ScratchpadAttr(), DnnlEngine(), ConvForwardHint(win, d, bias, t.src)});
  });
}

// ---- float64: direct loops ----

// Where the loops find things: a filter's group and first channel, and the extent of one filter's
// weights.
struct LoopLayout {
  int64_t taps;         // kh * kw
  int64_t filter;       // (C / G) * kh * kw: one filter's weights
  int64_t group_c;      // C / G: channels per group
  int64_t per_group_f;  // F / G: filters per group

  LoopLayout(const Window2d& win, const ConvDims& d)
      : taps(win.kernel[0] * win.kernel[1]),
        filter(d.g.c / d.groups * taps),
        group_c(d.g.c / d.groups),
        per_group_f(d.f / d.groups) {}
  // The first input channel filter f reads.
  int64_t FirstChannel(int64_t f) const { return f / per_group_f * group_c; }
};

// x (N, C, H, W), w (F, C / G, kh, kw), b (F,) or null -> y (N, F, OH, OW); x and y in either
// layout.
template <typename T>
void ConvForwardLoops(const Window2d& win, const ConvDims& d, const T* x, const T* w, const T* b,
                      T* y) {
  const Geometry2d& g = d.g;
  const LoopLayout l(win, d);
  const PlaneStrides xs = g.DataStrides(), ys = g.OutStrides(d.f);
  ParallelFor(g.n * d.f, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nf = begin; nf < end; ++nf) {
      const int64_t n = nf / d.f, f = nf % d.f;
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          T sum = b ? b[f] : T(0);
          for (int64_t c = 0; c < l.group_c; ++c) {
            const T* xc = x + xs.At(n, l.FirstChannel(f) + c, 0);
            const T* wc = w + f * l.filter + c * l.taps;
            ForEachTap(win, g, oh, ow, [&](int64_t i, int64_t j, int64_t at) {
              sum += xc[at * xs.step] * wc[i * win.kernel[1] + j];
            });
          }
          y[ys.At(n, f, oh * g.ow + ow)] = sum;
        }
      }
    }
  });
}

// dy (N, F, OH, OW), w (F, C / G, kh, kw) -> dx (N, C, H, W): each output's gradient scattered
// back through the taps that produced it; dy and dx in either layout.
template <typename T>
void ConvBackwardDataLoops(const Window2d& win, const ConvDims& d, const T* dy, const T* w, T* dx) {
  const Geometry2d& g = d.g;
  const LoopLayout l(win, d);
  const PlaneStrides xs = g.DataStrides(), ys = g.OutStrides(d.f);
  ParallelFor(g.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      std::fill_n(dx + n * xs.image, xs.image, T(0));  // image n, in either layout
      for (int64_t f = 0; f < d.f; ++f) {
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const T grad = dy[ys.At(n, f, oh * g.ow + ow)];
            for (int64_t c = 0; c < l.group_c; ++c) {
              T* dxc = dx + xs.At(n, l.FirstChannel(f) + c, 0);
              const T* wc = w + f * l.filter + c * l.taps;
              ForEachTap(win, g, oh, ow, [&](int64_t i, int64_t j, int64_t at) {
                dxc[at * xs.step] += grad * wc[i * win.kernel[1] + j];
              });
            }
          }
        }
      }
    }
  });
}

// dy (N, F, OH, OW), x (N, C, H, W) -> dw (F, C / G, kh, kw), db (F,) (db may be null); dy and x
// in either layout.
template <typename T>
void ConvBackwardWeightsLoops(const Window2d& win, const ConvDims& d, const T* dy, const T* x,
                              T* dw, T* db) {
  const Geometry2d& g = d.g;
  const LoopLayout l(win, d);
  const PlaneStrides xs = g.DataStrides(), ys = g.OutStrides(d.f);
  ParallelFor(d.f, 1, [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) {
      std::fill_n(dw + f * l.filter, l.filter, T(0));
      T bias_sum = 0;
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const T grad = dy[ys.At(n, f, oh * g.ow + ow)];
            bias_sum += grad;
            for (int64_t c = 0; c < l.group_c; ++c) {
              const T* xc = x + xs.At(n, l.FirstChannel(f) + c, 0);
              T* dwc = dw + f * l.filter + c * l.taps;
              ForEachTap(win, g, oh, ow, [&](int64_t i, int64_t j, int64_t at) {
                dwc[i * win.kernel[1] + j] += grad * xc[at * xs.step];
              });
            }
          }
        }
      }
      if (db) db[f] = bias_sum;
    }
  });
}

// ---- compute ----

// y += sum (float64, either layout: the same shape).
void AddSum(const TensorView& sum, const TensorView& y) {
  const double* s = sum.data<double>();
  double* out = y.data<double>();
  for (int64_t i = 0; i < y.size(); ++i) out[i] += s[i];
}

// in: (data, weight[, bias][, sum]); out: (output). float32 or bfloat16 data; a bfloat16 output
// added to is computed in float32 and rounded once, in Finish (Bf16AddTo::kInFloat).
void ConvForwardDnnl(const OpContext& ctx, const ConvParam& p, const ConvDims& d,
                     std::span<const TensorView> in, std::span<const OpReq> req,
                     std::span<const TensorView> out) {
  const TensorView* bias = p.no_bias ? nullptr : &in[2];
  const DType t = in[0].dtype();
  const ConvTypes types{t, t, bias ? bias->dtype() : t,
                        StagedType(out[0].dtype(), req[0], Bf16AddTo::kInFloat)};
  const DnnlPrimitive prim =
      ConvForwardPrimitive(p.window, d, bias != nullptr, p.act, p.with_sum, types);
  // with_sum: the output may share the sum's buffer (Op::inplace)
  StagedOutputs staged(ctx, req, out, p.with_sum, {ScratchpadBytes(prim)}, Bf16AddTo::kInFloat);
  LayoutBuffer src, weights, dst;
  // a bound graph's weight is reordered once per version, not at every call
  const uint64_t weight_version = ctx.input_versions.size() > 1 ? ctx.input_versions[1] : 0;
  const Window2d& win = p.window;
  const dnnl::memory y = dst.Output(ImageMemory(staged.Target(0), win), prim.desc.dst_desc());
  if (p.with_sum) {
    const dnnl::memory sum = ImageMemory(in[3], win);
    if (sum.get_data_handle() != y.get_data_handle() || sum.get_desc() != y.get_desc())
      Reorder(sum, y);
  }
  DnnlArgs args = {
      {DNNL_ARG_SRC, src.Input(ImageMemory(in[0], win), prim.desc.src_desc())},
      {DNNL_ARG_WEIGHTS, ReorderedOnce(DnnlWeightView(in[1], p.window, d), weight_version,
                                       prim.desc.weights_desc(), weights)},
      {DNNL_ARG_DST, y}};
  if (bias) args.emplace(DNNL_ARG_BIAS, DnnlMemory(*bias));
  ExecutePrimitive(prim, std::move(args), staged.Extra(0));
  dst.Flush();
  staged.Finish();
}

// in: (data, weight[, bias][, sum]); out: (output).
void ConvForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  const ConvDims d = ConvDimsOf("Convolution", p, in[0].shape());
  if (req[0] == OpReq::kNull) return;
  if (UseDnnl(in[0].dtype(), "Convolution", /*bfloat16=*/true))
    return ConvForwardDnnl(ctx, p, d, in, req, out);
  StagedOutputs staged(ctx, req, out, false);
  ConvForwardLoops<double>(p.window, d, in[0].data<double>(), in[1].data<double>(),
                           p.no_bias ? nullptr : in[2].data<double>(),
                           staged.Target(0).data<double>());
  if (p.with_sum) AddSum(in[3], staged.Target(0));
  if (p.act) ApplyActivation(*p.act, staged.Target(0));
  staged.Finish();
}

// The backward's primitives on float32 or bfloat16 data (t), each gradient typed as
// StagedOutputs stages it (a bfloat16 one added to: float32).
struct ConvBackwardPrimitives {
  DnnlPrimitive data, weights;
};

ConvBackwardPrimitives BackwardPrimitivesOf(const Window2d& win, const ConvDims& d, bool bias,
                                            DType t, std::span<const OpReq> req,
                                            std::span<const TensorView> out) {
  auto type = [&](size_t i) {
    return i < out.size() ? StagedType(out[i].dtype(), req[i], Bf16AddTo::kInFloat) : t;
  };
  return {ConvBackwardDataPrimitive(win, d, {type(0), t, t, t}),
          ConvBackwardWeightsPrimitive(win, d, bias, {t, type(1), type(2), t})};
}

// d_data, then d_weight and d_bias, each skipped when nothing reads it.
void ConvBackwardDnnl(const Window2d& win, const ConvDims& d, bool bias,
                      const ConvBackwardPrimitives& prims, std::span<const TensorView> in,
                      const StagedOutputs& staged) {
  const dnnl::memory dy_image = ImageMemory(in[0], win);
  const dnnl::memory x_image = ImageMemory(in[1], win);
  if (staged.Needed(0)) {
    LayoutBuffer dy, w, dx;
    ExecutePrimitive(
        prims.data,
        {{DNNL_ARG_DIFF_DST, dy.Input(dy_image, prims.data.desc.diff_dst_desc())},
         {DNNL_ARG_WEIGHTS, w.Input(DnnlWeightView(in[2], win, d), prims.data.desc.weights_desc())},
         {DNNL_ARG_DIFF_SRC,
          dx.Output(ImageMemory(staged.Target(0), win), prims.data.desc.diff_src_desc())}},
        staged.Extra(0));
    dx.Flush();
  }
  if (!NeedsWeightGrads(staged, bias)) return;
  const dnnl::primitive_desc_base& pd = prims.weights.desc;
  LayoutBuffer dy, x, dw;
  DnnlArgs args = {{DNNL_ARG_SRC, x.Input(x_image, pd.src_desc())},
                   {DNNL_ARG_DIFF_DST, dy.Input(dy_image, pd.diff_dst_desc())},
                   {DNNL_ARG_DIFF_WEIGHTS,
                    dw.Output(DnnlWeightView(staged.Target(1), win, d), pd.diff_weights_desc())}};
  if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, DnnlMemory(staged.Target(2)));
  ExecutePrimitive(prims.weights, std::move(args), staged.Extra(0));
  dw.Flush();
}

// in: (out_grad, data, weight); out: (d_data, d_weight[, d_bias]).
void ConvBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvParam& p = a.Get<ConvParam>();
  const ConvDims d = ConvDimsOf("_backward_Convolution", p, in[1].shape());
  const bool bias = !p.no_bias;
  if (UseDnnl(in[0].dtype(), "_backward_Convolution", /*bfloat16=*/true)) {
    const ConvBackwardPrimitives prims =
        BackwardPrimitivesOf(p.window, d, bias, in[0].dtype(), req, out);
    const size_t scratch = std::max(ScratchpadBytes(prims.data), ScratchpadBytes(prims.weights));
    StagedOutputs staged(ctx, req, out, false, {scratch}, Bf16AddTo::kInFloat);
    ConvBackwardDnnl(p.window, d, bias, prims, in, staged);
    staged.Finish();
    return;
  }
  StagedOutputs staged(ctx, req, out, false);
  const double *dy = in[0].data<double>(), *x = in[1].data<double>(), *w = in[2].data<double>();
  if (staged.Needed(0)) ConvBackwardDataLoops(p.window, d, dy, w, staged.Target(0).data<double>());
  if (NeedsWeightGrads(staged, bias)) {
    ConvBackwardWeightsLoops(p.window, d, dy, x, staged.Target(1).data<double>(),
                             bias ? staged.Target(2).data<double>() : nullptr);
  }
  staged.Finish();
}

// ---- _conv_depthwise (ops/nn/conv_depthwise.cc): float32, oneDNN's depthwise post-op ----

// The 1x1 convolution's forward with the depthwise stage (and both epilogues) as post-ops.
DnnlPrimitive ConvDepthwisePrimitive(const ConvDepthwiseParam& p, const ConvDims& d) {
  const int stride = static_cast<int>(p.depthwise.window.stride[0]);
  const ConvTypes f32 = ConvTypes::All(DType::kFloat32);
  const std::string key = ConvKey("forward_depthwise", p.conv.window, d, true, f32, p.conv.act) +
                          "/" + std::to_string(stride) + "/" + LayerActKey(p.depthwise.act);
  return CachedPrimitive(key, [&] {
    return MakePrimitive<dnnl::convolution_forward>(ConvForwardDescWith(
        p.conv.window, d, true, f32, DepthwiseLayerAttr(p.conv.act, stride, p.depthwise.act)));
  });
}

// in: (data, weight, bias, dw_weight, dw_bias), channels last; out: (output). Both weights are
// reordered once per version, as Convolution's are.
void ConvDepthwiseForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  const ConvDepthwiseParam& p = a.Get<ConvDepthwiseParam>();
  if (req[0] == OpReq::kNull) return;
  if (in[0].dtype() != DType::kFloat32)
    WEFT_THROW("_conv_depthwise: expected float32 data, found " << in[0].dtype());
  const ConvDims d = ConvDimsOf("_conv_depthwise", p.conv, in[0].shape());
  const ConvDims dw = ConvDimsOf("_conv_depthwise", p.depthwise, d.Output());
  const DnnlPrimitive prim = ConvDepthwisePrimitive(p, d);
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim)});
  const auto version = [&](size_t i) {
    return ctx.input_versions.size() > i ? ctx.input_versions[i] : 0;
  };
  const int dw_weights = DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS;
  LayoutBuffer src, weights, depthwise;
  DnnlArgs args = {
      {DNNL_ARG_SRC, src.Input(ImageMemory(in[0], true), prim.desc.src_desc())},
      {DNNL_ARG_WEIGHTS, ReorderedOnce(DnnlWeightView(in[1], p.conv.window, d), version(1),
                                       prim.desc.weights_desc(), weights)},
      {DNNL_ARG_BIAS, DnnlMemory(in[2])},
      {dw_weights,
       ReorderedOnce(DnnlWeightView(in[3], p.depthwise.window, dw), version(3),
                     prim.desc.query_md(dnnl::query::exec_arg_md, dw_weights), depthwise)},
      {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, DnnlMemory(in[4])},
      {DNNL_ARG_DST, ImageMemory(staged.Target(0), true)}};
  ExecutePrimitive(prim, std::move(args), staged.Extra(0));
  staged.Finish();
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"Convolution", {.compute = ConvForward}},
                               {"_backward_Convolution", {.compute = ConvBackward}},
                               {"_conv_depthwise", {.compute = ConvDepthwiseForward}},
                           });

}  // namespace
}  // namespace weft::cpu
