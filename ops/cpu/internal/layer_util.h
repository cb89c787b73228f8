// What the CPU computes of FullyConnected and Convolution share (their definitions share
// ops/nn/internal/layer_op.h): on float32 each runs its own oneDNN forward primitive
// (FullyConnected a matmul, Convolution a convolution in layouts oneDNN picks) and a backward-data
// plus a backward-weights primitive; RunLayerBackward runs that pair on plain layouts.
//
//   RunLayerBackward(data_prim, weights_prim, dy, x, w, /*bias=*/true, staged);
#pragma once

#include <optional>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"

namespace weft::cpu {

// ScratchpadAttr() with a layer's activation epilogue as oneDNN's eltwise post-op (none: none),
// after a sum post-op (what the destination holds is added first) when `sum`.
dnnl::primitive_attr LayerAttr(std::optional<ActType> act, bool sum = false);

// LayerAttr(act) followed by oneDNN's depthwise post-op (a 3x3 depthwise convolution of the
// result, with `dw_stride` and padding 1, its weights and bias the primitive's
// DNNL_ARG_ATTR_POST_OP_DW arguments) and its own epilogue `dw_act`: _conv_depthwise.
dnnl::primitive_attr DepthwiseLayerAttr(std::optional<ActType> act, int dw_stride,
                                        std::optional<ActType> dw_act);

// The name of a layer's activation epilogue in a primitive's cache key ("none").
inline const char* LayerActKey(std::optional<ActType> act) {
  return act ? ActivationName(*act) : "none";
}

// y = act(y) in place, with the activation's functor (what Activation computes; the float64
// layers' epilogue). Defined in ops/cpu/unary.cc.
void ApplyActivation(ActType act, const TensorView& y);

// Whether the backward-weights step has a reader: d_weight, or d_bias when there is one.
inline bool NeedsWeightGrads(const StagedOutputs& staged, bool bias) {
  return staged.Needed(1) || (bias && staged.Needed(2));
}

// float32 backward: d_data (viewed as x's shape) through data_prim, then d_weight and d_bias
// through weights_prim; each step is skipped when nothing reads its outputs. dy and x are viewed
// as the primitives expect them. Extra(0) of `staged` is the scratchpad of both primitives.
void RunLayerBackward(const DnnlPrimitive& data_prim, const DnnlPrimitive& weights_prim,
                      const TensorView& dy, const TensorView& x, const TensorView& w, bool bias,
                      const StagedOutputs& staged);

}  // namespace weft::cpu
