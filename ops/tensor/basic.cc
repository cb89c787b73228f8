// Small utility ops: zeros_like and ones_like (arrays of the input's shape and dtype filled with 0
// or 1, the input read for its shape only; the gradient pass uses zeros_like for outputs that
// receive no gradient), _copy (the gradient pass uses it where one entry must fill two outputs),
// and stop_gradient (the input, through which no gradient flows). Compute: ops/cpu/basic.cc,
// ops/gpu/basic.cc.
#include "ops/op.h"

namespace weft {
namespace {

std::vector<Shape> SameShape(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

const bool defined = [] {
  WEFT_REGISTER_OP(zeros_like)
      .Describe("zeros of the input's shape and dtype (the input is read for its shape only)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Gradient([](const Attrs&, GradBuilder& g) {});
  WEFT_REGISTER_OP(ones_like)
      .Describe("ones of the input's shape and dtype (the input is read for its shape only)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Gradient([](const Attrs&, GradBuilder& g) {});
  WEFT_REGISTER_OP(_copy)
      .Describe(
          "the input, copied (the gradient pass uses it where one entry must fill two outputs)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Inplace({{0, 0}})
      .Pointwise(PointwiseKind::kUnary, "weft::fn::Identity")
      .Gradient([](const Attrs&, GradBuilder& g) { g.SetInputGrad(0, g.OutGrad(0)); });
  WEFT_REGISTER_OP(stop_gradient)
      .Describe("the input, through which no gradient flows (to output predictions beside a loss)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Inplace({{0, 0}})
      .Gradient([](const Attrs&, GradBuilder&) {});
  return true;
}();

}  // namespace
}  // namespace weft
