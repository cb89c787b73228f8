// Reductions over axes: sum, mean and max (WEFT_REDUCE_OPS), and their backward ops.
//
// Attributes: axis, a tuple of axes (negative counts from the end; absent or "()": every axis;
// an axis given twice is an error), and keepdims (default false: the reduced axes are dropped;
// true: they stay, with extent 1). Reducing every axis without keepdims gives a scalar, shape ().
// The sum of an empty axis is 0, its mean NaN; the max of an empty axis is a shape error.
//
// max returns NaN where the reduced values hold one; its gradient goes to one position per
// output, the first maximum in row-major order of the reduced axes (the first NaN, if any).
//
// The backward ops `_backward_<op>` take (out_grad, data) and give d data; they read data for its
// shape (and, for max, its values). Compute: ops/cpu/reduce.cc, ops/gpu/reduce.cc.
#include <string>

#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

ReduceParam ParseReduce(AttrReader& r) {
  return {r.IntList("axis", std::vector<int64_t>{}), r.Bool("keepdims", false)};
}

Shape ReducedShape(const std::string& op, const ReduceParam& p, const Shape& in) {
  const std::vector<bool> reduced = ReducedAxes(op, p, in);
  Shape out;
  for (int a = 0; a < in.ndim(); ++a) {
    if (!reduced[a]) {
      out.PushBack(in[a]);
    } else if (p.keepdims) {
      out.PushBack(1);
    }
  }
  return out;
}

std::vector<Shape> ReduceShape(const std::string& op, ReduceKind kind, const Attrs& a,
                               const Shape& in) {
  const Shape out = ReducedShape(op, a.Get<ReduceParam>(), in);
  if (kind == ReduceKind::kMax && in.Size() == 0 && out.Size() > 0) {
    WEFT_THROW(op << ": expected reduced axes with at least one element each, found input " << in
                  << " reduced to " << out);
  }
  return {out};
}

// Registers `op` and `_backward_<op>`.
void DefineReduce(const std::string& op, ReduceKind kind, const std::string& description) {
  RegisterOp(op)
      .Describe(description +
                " over `axis` (default: every axis), keepdims to keep reduced axes as 1")
      .Params(ParseReduce)
      .Inputs({"data"})
      .InferShape([op, kind](const Attrs& a, const std::vector<Shape>& in) {
        return ReduceShape(op, kind, a, in[0]);
      })
      .Gradient(GradientFromBackwardOp(op));
  RegisterOp("_backward_" + op)
      .Describe("gradient of " + op + ": takes (out_grad, data), gives d data")
      .Params(ParseReduce)
      .Inputs({"out_grad", "data"})
      .InferShape([op](const Attrs& a, const std::vector<Shape>& in) {
        CheckSameShape(in[0], ReducedShape(op, a.Get<ReduceParam>(), in[1]),
                       "the output gradient and the output");
        return std::vector<Shape>{in[1]};
      });
}

const bool defined = [] {
#define WEFT_DEFINE_REDUCE(name, kind, description) \
  DefineReduce(#name, ReduceKind::kind, description);
  WEFT_REDUCE_OPS(WEFT_DEFINE_REDUCE)
#undef WEFT_DEFINE_REDUCE
  return true;
}();

}  // namespace
}  // namespace weft
