// FullyConnected: output = data * weight^T + bias, with MXNet's weight layout.
//
//   data    (N, d1, ..., dk)          flatten=true:  seen as (M, K) = (N, d1 * ... * dk)
//           (d0, ..., dk-1, K)        flatten=false: seen as (M, K) = (d0 * ... * dk-1, K)
//   weight  (num_hidden, K)
//   bias    (num_hidden,)             absent when no_bias
//   output  (N, num_hidden)           flatten=true
//           (d0, ..., dk-1, num_hidden) flatten=false
//
// act_type (default "none"): an activation (Activation's act_type: relu, gelu, gelu_tanh, ...)
// applied to the output in the same call, an epilogue (oneDNN's post-op, cuBLASLt's epilogue or
// a kernel after the GEMM): FullyConnected(act_type=a) = Activation(FullyConnected, act_type=a).
// passes/fold_activation.h sets it on inference graphs. Its gradient recomputes the output before
// the activation where the activation's gradient reads it (gelu's), so training graphs keep the
// activation as an op of its own (which fusion then joins with its neighbours).
//
// _backward_FullyConnected takes (out_grad, data, weight) and gives (d_data, d_weight, d_bias),
// without d_bias when no_bias (out_grad: the gradient before the activation); with
// param_grad_dtype float32 (16-bit data), d_weight and d_bias are float32, accumulated in float32
// and rounded once, as a mixed-precision step's master gradients want them. Compute:
// ops/cpu/fully_connected.cc, ops/gpu/fully_connected.cc.
#include "core/error.h"
#include "ops/nn/internal/layer_op.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

FcParam ParseFc(AttrReader& r) {
  FcParam p{r.Int("num_hidden", std::nullopt, 1), r.Bool("no_bias", false), r.Bool("flatten", true),
            ReadLayerAct(r)};
  if (!r.String("param_grad_dtype", "").empty())
    p.param_grad_dtype = r.Choice<DType>("param_grad_dtype", {{"float32", DType::kFloat32}}, {});
  return p;
}

// Checks data, weight and (unless no_bias) bias; returns the output shape.
Shape FcOutputShape(const FcParam& p, const std::vector<Shape>& in) {
  const Shape& data = in[0];
  if (data.ndim() < 1 || data.Size() == 0) {
    WEFT_THROW("FullyConnected: data must be a non-empty array with at least one axis, found "
               << data);
  }
  const FcDims d = FcDimsOf(p, data);
  const Shape weight{d.o, d.k};
  if (in[1] != weight)
    WEFT_THROW("FullyConnected: weight must be " << weight << ", found " << in[1]);
  if (!p.no_bias && in[2] != Shape{d.o}) {
    WEFT_THROW("FullyConnected: bias must be " << Shape{d.o} << ", found " << in[2]);
  }
  if (p.flatten) return Shape{data[0], d.o};
  Shape out(data.dims().first(data.ndim() - 1));
  out.PushBack(d.o);
  return out;
}

std::vector<Shape> FcShape(const Attrs& a, const std::vector<Shape>& in) {
  return {FcOutputShape(a.Get<FcParam>(), in)};
}

// in: (out_grad, data, weight).
std::vector<Shape> FcBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const FcParam& p = a.Get<FcParam>();
  FcParam without_bias = p;
  without_bias.no_bias = true;
  const Shape out = FcOutputShape(without_bias, {in[1], in[2]});
  if (in[0] != out)
    WEFT_THROW("_backward_FullyConnected: out_grad must be " << out << ", found " << in[0]);
  if (p.no_bias) return {in[1], in[2]};
  return {in[1], in[2], Shape{p.num_hidden}};
}

// in: (out_grad, data, weight), one dtype -> (d_data, d_weight[, d_bias]): d_data in it, the
// parameter gradients in param_grad_dtype (float32, for 16-bit data only) or in it.
std::vector<DType> FcBackwardTypes(const Attrs& a, const std::vector<DType>& in) {
  const FcParam& p = a.Get<FcParam>();
  const DType t = OneInputType("_backward_FullyConnected", in);
  const DType grads = p.param_grad_dtype.value_or(t);
  if (grads != t && !Is16BitFloat(t)) {
    WEFT_THROW("_backward_FullyConnected: param_grad_dtype "
               << grads << " expected 16-bit data, found " << t);
  }
  if (p.no_bias) return {t, grads};
  return {t, grads, grads};
}

// weight (num_hidden, K) and bias (num_hidden,) from data.
void FcInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const FcParam& p = a.Get<FcParam>();
  if (!in[0] || in[0]->ndim() < 1) return;
  const Shape& data = *in[0];
  const int64_t k = p.flatten ? (data[0] > 0 ? data.Size() / data[0] : 0) : data[data.ndim() - 1];
  if (!in[1]) in[1] = Shape{p.num_hidden, k};
  if (in.size() > 2 && !in[2]) in[2] = Shape{p.num_hidden};
}

const bool defined = [] {
  DefineLayerOp<FcParam>(
      {"FullyConnected",
       "data * weight^T + bias; weight is (num_hidden, K); flatten folds data to (N, K)", ParseFc,
       FcShape, FcBackwardShape, FcInputShapes, FcBackwardTypes});
  return true;
}();

}  // namespace
}  // namespace weft
