// What the definitions of FullyConnected and Convolution share: both are layers with weights,
//
//   <op>(data, weight[, bias][, sum]) -> output            bias absent when no_bias; sum when
//                                                          the parameters have with_sum set
//   _backward_<op>(out_grad, data, weight) -> (d_data, d_weight[, d_bias])
//
// defined the same way, with the gradient rule that connects them (through an activation
// epilogue where the layer's parameters have one: `act`; sum's gradient is the gradient before
// it). No compute: each device registers its own for both ops (ops/cpu/*.cc, ops/gpu/*.cc).
//
//   DefineLayerOp<FcParam>({"FullyConnected", "...", ParseFc, FcShape, FcBackwardShape,
//   FcInputShapes});
#pragma once

#include <string>

#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"

namespace weft {

// The gradient before a layer's activation epilogue `act` (op `op` with attributes `a`, its
// `num_inputs` inputs): _backward_Activation of the output gradient and what the activation's
// gradient reads: the layer's output, or its output before the activation, recomputed by the
// layer without it.
GradEntry GradBeforeActivation(const std::string& op, const Attrs& a, ActType act, int num_inputs,
                               GradBuilder& g);

// P has `bool no_bias` (and may have `std::optional<ActType> act` and `bool with_sum`)
template <typename P>
struct LayerOpDef {
  std::string name;
  std::string description;
  P (*parse)(AttrReader&);
  ShapeFn infer_shape;                   // (data, weight[, bias]) -> (output)
  ShapeFn infer_backward_shape;          // (out_grad, data, weight) -> (d_data, d_weight[, d_bias])
  InputShapeFn infer_input_shapes;       // weight and bias from data
  TypeFn infer_backward_type = nullptr;  // null: every output the inputs' one dtype
};

// Registers <name> and _backward_<name>, with the gradient rule that connects them.
template <typename P>
void DefineLayerOp(const LayerOpDef<P>& def) {
  const CountFn with_bias = [](const Attrs& a) { return a.Get<P>().no_bias ? 2 : 3; };
  const auto with_sum = [](const Attrs& a) {
    if constexpr (requires(const P& p) { p.with_sum; }) return a.Get<P>().with_sum;
    return false;
  };
  const CountFn inputs = [with_bias, with_sum](const Attrs& a) {
    return with_bias(a) + (with_sum(a) ? 1 : 0);
  };
  const std::string backward = "_backward_" + def.name;
  RegisterOp(def.name)
      .Describe(def.description)
      .Params(def.parse)
      .Inputs({"data", "weight", "bias", "sum"})
      .VariadicInputs(inputs)
      .Inplace({{3, 0}})  // sum (an op without one has no input 3)
      .InferShape(def.infer_shape)
      .InferInputShapes(def.infer_input_shapes)
      .Gradient(
          [name = def.name, backward, with_bias, with_sum, inputs](const Attrs& a, GradBuilder& g) {
            const int grads = with_bias(a);
            GradEntry dy = g.OutGrad(0);
            if constexpr (requires(const P& p) { p.act; }) {
              if (a.Get<P>().act) dy = GradBeforeActivation(name, a, *a.Get<P>().act, inputs(a), g);
            }
            GradEntry d = g.Op(backward, {dy, g.Input(0), g.Input(1)}, a.raw(), grads);
            for (int i = 0; i < grads; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
            if (with_sum(a)) g.SetInputGrad(3, dy);
          });
  Op& b = RegisterOp(backward)
              .Describe("gradient of " + def.name)
              .Params(def.parse)
              .Inputs({"out_grad", "data", "weight"})
              .Outputs(with_bias)
              .InferShape(def.infer_backward_shape);
  if (def.infer_backward_type) b.InferType(def.infer_backward_type);
}

}  // namespace weft
