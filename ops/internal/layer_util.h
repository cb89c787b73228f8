// What FullyConnected and Convolution share: both are layers with weights,
//
//   <op>(data, weight[, bias]) -> output                   bias absent when no_bias
//   _backward_<op>(out_grad, data, weight) -> (d_data, d_weight[, d_bias])
//
// registered the same way. On float32 each runs its own oneDNN forward primitive (FullyConnected a
// matmul, Convolution a convolution in layouts oneDNN picks) and a backward-data plus a
// backward-weights primitive; RunLayerBackward runs that pair on plain layouts.
//
//   RegisterLayerOp<FcParam>({"FullyConnected", "...", ParseFc, FcShape, FcBackwardShape, FcInputShapes,
//                             FcForward, FcBackward});
#pragma once

#include <string>

#include "ops/internal/cpu_util.h"
#include "ops/internal/dnnl_util.h"
#include "ops/op.h"

namespace weft::cpu {

template <typename P>  // P has `bool no_bias`
struct LayerOpDef {
  std::string name;
  std::string description;
  P (*parse)(AttrReader&);
  ShapeFn infer_shape;           // (data, weight[, bias]) -> (output)
  ShapeFn infer_backward_shape;  // (out_grad, data, weight) -> (d_data, d_weight[, d_bias])
  InputShapeFn infer_input_shapes;  // weight and bias from data
  ComputeFn forward;
  ComputeFn backward;
};

// Registers <name> and _backward_<name>, with the gradient rule that connects them.
template <typename P>
void RegisterLayerOp(const LayerOpDef<P>& def) {
  const CountFn with_bias = [](const Attrs& a) { return a.Get<P>().no_bias ? 2 : 3; };
  const std::string backward = "_backward_" + def.name;
  RegisterOp(def.name)
      .Describe(def.description)
      .Params(def.parse)
      .Inputs({"data", "weight", "bias"})
      .VariadicInputs(with_bias)
      .InferShape(def.infer_shape)
      .InferInputShapes(def.infer_input_shapes)
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, def.forward)
      .Gradient([backward, with_bias](const Attrs& a, GradBuilder& g) {
        const int grads = with_bias(a);
        GradEntry d = g.Op(backward, {g.OutGrad(0), g.Input(0), g.Input(1)}, a.raw(), grads);
        for (int i = 0; i < grads; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
      });
  RegisterOp(backward)
      .Describe("gradient of " + def.name)
      .Params(def.parse)
      .Inputs({"out_grad", "data", "weight"})
      .Outputs(with_bias)
      .InferShape(def.infer_backward_shape)
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, def.backward);
}

// Whether the backward-weights step has a reader: d_weight, or d_bias when there is one.
inline bool NeedsWeightGrads(const StagedOutputs& staged, bool bias) {
  return staged.Needed(1) || (bias && staged.Needed(2));
}

// float32 backward: d_data (viewed as x's shape) through data_prim, then d_weight and d_bias
// through weights_prim; each step is skipped when nothing reads its outputs. dy and x are viewed
// as the primitives expect them. Extra(0) of `staged` is the scratchpad of both primitives.
void RunLayerBackward(const DnnlPrimitive& data_prim, const DnnlPrimitive& weights_prim, const TensorView& dy,
                      const TensorView& x, const TensorView& w, bool bias, const StagedOutputs& staged);

}  // namespace weft::cpu
