// _conv_depthwise: a 1x1 convolution whose output only a 3x3 depthwise convolution reads
// (MobileNet's expansion and its depthwise filter), computed as one op, so the expanded tensor,
// the widest of the block, is never written out and read back. passes/fold_depthwise.h makes it on
// CPU inference graphs; the CPU computes it with oneDNN's depthwise post-op (the 1x1 primitive
// filters each tile of its output while it is in cache). Pass-only: never called, never in JSON.
//
//   data       (N, H, W, C)          layout NHWC
//   weight     (F, C, 1, 1)          the 1x1 convolution's, its bias (F,) and epilogue (act_type)
//   bias       (F,)
//   dw_weight  (F, 1, 3, 3)          the depthwise convolution's: stride 1 or 2, padding 1
//   dw_bias    (F,)
//   output     (N, OH, OW, F)        = dw_act(depthwise(act(conv1x1(data) + bias)) + dw_bias)
//
// The same sums as the two Convolutions (ops/nn/convolution.cc), in float32.
#include "core/error.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

std::vector<Shape> ConvDepthwiseShape(const Attrs& a, const std::vector<Shape>& in) {
  const ConvDepthwiseParam& p = a.Get<ConvDepthwiseParam>();
  const ConvDims conv = ConvDimsOf("_conv_depthwise", p.conv, in[0]);
  const ConvDims depthwise = ConvDimsOf("_conv_depthwise", p.depthwise, conv.Output());
  const Shape expected[] = {conv.Weight(p.conv.window), Shape{conv.f},
                            depthwise.Weight(p.depthwise.window), Shape{depthwise.f}};
  for (size_t i = 0; i < 4; ++i) {
    if (in[i + 1] != expected[i]) {
      WEFT_THROW("_conv_depthwise: input " << i + 1 << " must be " << expected[i] << ", found "
                                           << in[i + 1]);
    }
  }
  return {depthwise.Output()};
}

const bool defined = [] {
  RegisterOp("_conv_depthwise")
      .Describe(
          "a 1x1 convolution and the 3x3 depthwise convolution that reads it, as one op (made by "
          "the depthwise folding pass when a CPU inference graph is bound)")
      .PassOnly("the depthwise folding pass")
      .Inputs({"data", "weight", "bias", "dw_weight", "dw_bias"})
      .InferShape(ConvDepthwiseShape);
  return true;
}();

}  // namespace

Attrs ConvDepthwiseAttrs(const ConvDepthwiseParam& p) {
  static const std::string* name = &GetOp("_conv_depthwise").name;
  return Attrs({}, ParsedParams::Of(p), name);
}

}  // namespace weft
