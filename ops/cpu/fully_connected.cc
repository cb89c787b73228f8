// CPU compute of FullyConnected and _backward_FullyConnected (ops/nn/fully_connected.cc defines
// them and says what they compute). float32 and bfloat16 run oneDNN's inner product (forward,
// backward data, backward weights; bfloat16 accumulating in float32, an output added to written
// in float32 and rounded once after the add); float64 the loops below. An
// activation epilogue (act_type) is the matmul's post-op on float32, weft's functor over the output
// on float64.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/cpu/internal/layer_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// ---- float32: oneDNN inner product ----

dnnl::inner_product_forward::primitive_desc FcForwardDesc(const FcDims& d, bool bias, DType t) {
  const auto src = PlainDesc(Shape{d.m, d.k}, t), weights = PlainDesc(Shape{d.o, d.k}, t),
             dst = PlainDesc(Shape{d.m, d.o}, t);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto desc =
      bias ? dnnl::inner_product_forward::desc(kind, src, weights, PlainDesc(Shape{d.o}, t), dst)
           : dnnl::inner_product_forward::desc(kind, src, weights, dst);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

// The weight (O, K), row-major, seen as the (K, O) operand of y = x * w^T.
dnnl::memory::desc TransposedWeightDesc(const FcDims& d, DType t) {
  return dnnl::memory::desc({d.k, d.o}, DnnlType(t), dnnl::memory::dims{1, d.k});
}

// Forward as a matmul on the transposed weight: measured faster than inner_product_forward on
// plain layouts (which used a slower path than its own backward, for the same GEMM sizes).
// The activation epilogue, if any, is the matmul's eltwise post-op. Every primitive here takes
// float32 or bfloat16 (t), the bfloat16 ones accumulating in float32; what a primitive writes is
// of type t too, but float32 for a bfloat16 output added to (StagedType: Finish adds it in float
// and rounds once, Bf16AddTo::kInFloat), `dst` below.
DnnlPrimitive FcForwardPrimitive(const FcDims& d, bool bias, std::optional<ActType> act, DType t,
                                 DType dst_t) {
  const std::string key = PrimitiveKey("FullyConnected/forward_matmul", d.m, d.k, d.o, bias,
                                       LayerActKey(act), t, dst_t);
  return CachedPrimitive(
      key,
      [&] {
        const auto src = PlainDesc(Shape{d.m, d.k}, t), dst = PlainDesc(Shape{d.m, d.o}, dst_t);
        const auto w = TransposedWeightDesc(d, t);
        const auto desc = bias ? dnnl::matmul::desc(src, w, PlainDesc(Shape{1, d.o}, t), dst)
                               : dnnl::matmul::desc(src, w, dst);
        return MakePrimitive<dnnl::matmul>({desc, LayerAttr(act), DnnlEngine()});
      },
      DnnlThreadsFor(d.m * d.k * d.o));
}

// dx_t: d_data's staged type.
DnnlPrimitive FcBackwardDataPrimitive(const FcDims& d, DType t, DType dx_t) {
  return CachedPrimitive(
      PrimitiveKey("FullyConnected/backward_data", d.m, d.k, d.o, t, dx_t),
      [&] {
        const dnnl::inner_product_backward_data::desc desc(PlainDesc(Shape{d.m, d.k}, dx_t),
                                                           PlainDesc(Shape{d.o, d.k}, t),
                                                           PlainDesc(Shape{d.m, d.o}, t));
        return MakePrimitive<dnnl::inner_product_backward_data>(
            {desc, ScratchpadAttr(), DnnlEngine(), FcForwardDesc(d, false, t)});
      },
      DnnlThreadsFor(d.m * d.k * d.o));
}

// dw_t, db_t: d_weight's and d_bias's staged types.
DnnlPrimitive FcBackwardWeightsPrimitive(const FcDims& d, bool bias, DType t, DType dw_t,
                                         DType db_t) {
  return CachedPrimitive(
      PrimitiveKey("FullyConnected/backward_weights", d.m, d.k, d.o, bias, t, dw_t, db_t),
      [&] {
        using Desc = dnnl::inner_product_backward_weights::desc;
        const auto src = PlainDesc(Shape{d.m, d.k}, t), weights = PlainDesc(Shape{d.o, d.k}, dw_t),
                   dst = PlainDesc(Shape{d.m, d.o}, t);
        const Desc desc =
            bias ? Desc(src, weights, PlainDesc(Shape{d.o}, db_t), dst) : Desc(src, weights, dst);
        return MakePrimitive<dnnl::inner_product_backward_weights>(
            {desc, ScratchpadAttr(), DnnlEngine(), FcForwardDesc(d, bias, t)});
      },
      DnnlThreadsFor(d.m * d.k * d.o));
}

// ---- float64: loops ----

// x (M, K), w (O, K), b (O,) or null -> y (M, O).
template <typename T>
void FcForwardLoops(const FcDims& d, const T* x, const T* w, const T* b, T* y) {
  ParallelFor(d.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t o = 0; o < d.o; ++o) {
        T sum = b ? b[o] : T(0);
        for (int64_t k = 0; k < d.k; ++k) sum += x[i * d.k + k] * w[o * d.k + k];
        y[i * d.o + o] = sum;
      }
    }
  });
}

// dy (M, O), w (O, K) -> dx (M, K) = dy * w.
template <typename T>
void FcBackwardDataLoops(const FcDims& d, const T* dy, const T* w, T* dx) {
  ParallelFor(d.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      std::fill_n(dx + i * d.k, d.k, T(0));
      for (int64_t o = 0; o < d.o; ++o) {
        for (int64_t k = 0; k < d.k; ++k) dx[i * d.k + k] += dy[i * d.o + o] * w[o * d.k + k];
      }
    }
  });
}

// dy (M, O), x (M, K) -> dw (O, K) = dy^T * x, db (O,) = column sums of dy (db may be null).
template <typename T>
void FcBackwardWeightsLoops(const FcDims& d, const T* dy, const T* x, T* dw, T* db) {
  ParallelFor(d.o, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      std::fill_n(dw + o * d.k, d.k, T(0));
      T bias_sum = 0;
      for (int64_t i = 0; i < d.m; ++i) {
        for (int64_t k = 0; k < d.k; ++k) dw[o * d.k + k] += dy[i * d.o + o] * x[i * d.k + k];
        bias_sum += dy[i * d.o + o];
      }
      if (db) db[o] = bias_sum;
    }
  });
}

// ---- compute ----

// The forward matmul's arguments: data (M, K), the weight as (K, O), `bias` (null: none) and
// `dst` (M, O).
DnnlArgs FcForwardArgs(const FcDims& d, std::span<const TensorView> in, const TensorView* bias,
                       const TensorView& dst) {
  DnnlArgs args = {{DNNL_ARG_SRC, DnnlMemory(in[0].Reshaped(Shape{d.m, d.k}))},
                   {DNNL_ARG_WEIGHTS, dnnl::memory(TransposedWeightDesc(d, in[1].dtype()),
                                                   DnnlEngine(), in[1].raw())},
                   {DNNL_ARG_DST, DnnlMemory(dst.Reshaped(Shape{d.m, d.o}))}};
  if (bias) args.emplace(DNNL_ARG_BIAS, DnnlMemory(bias->Reshaped(Shape{1, d.o})));
  return args;
}

// in: (data, weight[, bias]); out: (output).
void FcForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
               std::span<const OpReq> req, std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = FcDimsOf(p, in[0].shape());
  const TensorView* bias = p.no_bias ? nullptr : &in[2];
  if (req[0] == OpReq::kNull) return;
  if (!UseDnnl(in[0].dtype(), "FullyConnected", /*bfloat16=*/true)) {
    StagedOutputs staged(ctx, req, out, false);
    FcForwardLoops<double>(d, in[0].data<double>(), in[1].data<double>(),
                           bias ? bias->data<double>() : nullptr, staged.Target(0).data<double>());
    if (p.act) ApplyActivation(*p.act, staged.Target(0));
    staged.Finish();
    return;
  }
  const DType t = in[0].dtype();
  const DnnlPrimitive prim = FcForwardPrimitive(
      d, bias != nullptr, p.act, t, StagedType(out[0].dtype(), req[0], Bf16AddTo::kInFloat));
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim)}, Bf16AddTo::kInFloat);
  ExecutePrimitive(prim, FcForwardArgs(d, in, bias, staged.Target(0)), staged.Extra(0));
  staged.Finish();
}

// Bind-time preparation: a float32 call that overwrites its output runs its primitive bound to
// these tensors (BoundPrimitive; a generation step's one-row products are mostly that overhead);
// any other call the compute above.
ComputeFn PrepareFcForward(const Attrs& a, Device, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  const bool overwrite = req[0] == OpReq::kWrite || req[0] == OpReq::kWriteInplace;
  if (in[0].dtype() == DType::kFloat64 || !overwrite) return FcForward;
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = FcDimsOf(p, in[0].shape());
  const TensorView* bias = p.no_bias ? nullptr : &in[2];
  auto bound = std::make_shared<const BoundPrimitive>(
      FcForwardPrimitive(d, bias != nullptr, p.act, in[0].dtype(), out[0].dtype()),
      FcForwardArgs(d, in, bias, out[0]));
  return [bound](const OpContext& ctx, const Attrs&, std::span<const TensorView>,
                 std::span<const OpReq>, std::span<const TensorView>) { bound->Run(ctx); };
}

// in: (out_grad, data, weight); out: (d_data, d_weight[, d_bias]).
void FcBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const FcParam& p = a.Get<FcParam>();
  const FcDims d = FcDimsOf(p, in[1].shape());
  const bool bias = !p.no_bias;
  if (!UseDnnl(in[0].dtype(), "_backward_FullyConnected", /*bfloat16=*/true)) {
    StagedOutputs staged(ctx, req, out, false);
    const double *dy = in[0].data<double>(), *x = in[1].data<double>(), *w = in[2].data<double>();
    if (staged.Needed(0)) FcBackwardDataLoops(d, dy, w, staged.Target(0).data<double>());
    if (NeedsWeightGrads(staged, bias)) {
      FcBackwardWeightsLoops(d, dy, x, staged.Target(1).data<double>(),
                             bias ? staged.Target(2).data<double>() : nullptr);
    }
    staged.Finish();
    return;
  }
  const DType t = in[0].dtype();
  const auto staged_type = [&](size_t i) {  // d_data, d_weight, d_bias
    return i < out.size() ? StagedType(out[i].dtype(), req[i], Bf16AddTo::kInFloat) : t;
  };
  const DnnlPrimitive data_prim = FcBackwardDataPrimitive(d, t, staged_type(0)),
                      weights_prim =
                          FcBackwardWeightsPrimitive(d, bias, t, staged_type(1), staged_type(2));
  StagedOutputs staged(ctx, req, out, false,
                       {std::max(ScratchpadBytes(data_prim), ScratchpadBytes(weights_prim))},
                       Bf16AddTo::kInFloat);
  RunLayerBackward(data_prim, weights_prim, in[0].Reshaped(Shape{d.m, d.o}),
                   in[1].Reshaped(Shape{d.m, d.k}), in[2], bias, staged);
  staged.Finish();
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"FullyConnected",
                                {.compute = FcForward, .prepare = PrepareFcForward}},
                               {"_backward_FullyConnected", {.compute = FcBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
