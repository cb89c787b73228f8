// where(condition, a, b): a where condition is nonzero, else b, with numpy-style broadcasting of
// the three (as numpy.where and torch.where), and its backward op. The three have one dtype
// (a mask is a float array of 0s and 1s). Forward is pointwise (PointwiseKind::kTernary): the
// fusion pass takes it where its operands all have the output's shape.
//
// Gradient: `_backward_where` takes (out_grad, condition, a, b), a and b read for their shapes
// only, and gives (d a, d b): out_grad where that operand was picked, 0 elsewhere, summed over the
// axes the operand was broadcast along. condition gets none.
// Compute: ops/cpu/where.cc, ops/gpu/where.cc; math: ops/math/ternary.h.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"

namespace weft {
namespace {

// The broadcast shape of `shapes`, aligned at their last axis.
Shape BroadcastAll(const std::vector<Shape>& shapes) {
  int n = 0;
  for (const Shape& s : shapes) n = std::max(n, s.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int64_t extent = 1;
    for (const Shape& s : shapes) {
      const int k = s.ndim() - n + i;
      const int64_t e = k >= 0 ? s[k] : 1;
      if (e != 1 && extent != 1 && e != extent) {
        WEFT_THROW("where: condition " << shapes[0] << ", a " << shapes[1] << " and b " << shapes[2]
                                       << " cannot be broadcast together (axis " << i << ": "
                                       << extent << " vs " << e << ")");
      }
      if (e != 1) extent = e;
    }
    out.PushBack(extent);
  }
  return out;
}

std::vector<Shape> WhereShape(const Attrs&, const std::vector<Shape>& in) {
  return {BroadcastAll(in)};
}

// in: (out_grad, condition, a, b).
std::vector<Shape> WhereBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  CheckSameShape(in[0], BroadcastAll({in[1], in[2], in[3]}),
                 "the output gradient and the broadcast operands");
  return {in[2], in[3]};
}

void WhereGradient(const Attrs&, GradBuilder& g) {
  const GradEntry d =
      g.Op("_backward_where", {g.OutGrad(0), g.Input(0), g.Input(1), g.Input(2)}, {}, 2);
  g.SetInputGrad(1, g.NodeOutput(d, 0));
  g.SetInputGrad(2, g.NodeOutput(d, 1));
}

const bool defined = [] {
  WEFT_REGISTER_OP(where)
      .Describe(
          "a where condition is nonzero, else b, with numpy-style broadcasting of the three "
          "(one dtype)")
      .Inputs({"condition", "a", "b"})
      .InferShape(WhereShape)
      .Inplace({{1, 0}, {2, 0}})
      .Pointwise(PointwiseKind::kTernary, "weft::fn::Where")
      .Gradient(WhereGradient);
  WEFT_REGISTER_OP(_backward_where)
      .Describe(
          "gradient of where: takes (out_grad, condition, a, b), a and b read for their shapes, "
          "and gives (d a, d b)")
      .Inputs({"out_grad", "condition", "a", "b"})
      .Outputs(2)
      .InferShape(WhereBackwardShape);
  return true;
}();

}  // namespace
}  // namespace weft
