// The elementwise unary ops of unary_ops.h, their *_scalar forms, Activation, and their backward
// ops: attributes, shapes, gradients and the functor each applies. The backward op
// `_backward_<name>` takes (dy, x, y) and gives dx = dy * F::Grad(x, y, scalar).
// Compute: ops/cpu/unary.cc, ops/gpu/unary.cc; math: ops/math/unary.h.
#include <string>

#include "ops/elementwise/unary_ops.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"

namespace weft {
namespace {

ScalarParam ParseScalar(AttrReader& r) { return {r.Float("scalar", std::nullopt)}; }

ActivationParam ParseActivation(AttrReader& r) {
#define WEFT_ACT_CHOICE(value, name, functor) {name, ActType::value},
  return {r.Choice<ActType>("act_type", {WEFT_ACTIVATIONS(WEFT_ACT_CHOICE)}, std::nullopt)};
#undef WEFT_ACT_CHOICE
}

std::vector<Shape> SameAsInput0(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

// (dy, x, y) of one shape.
std::vector<Shape> BackwardShape(const Attrs&, const std::vector<Shape>& in) {
  CheckSameShape(in[0], in[1], "the output gradient and the input");
  CheckSameShape(in[0], in[2], "the output gradient and the output");
  return {in[0]};
}

double ScalarOf(const Attrs& a) { return a.Get<ScalarParam>().scalar; }
std::string ActivationFunctorOf(const Attrs& a) { return ActivationFunctor(a.Get<ActivationParam>().act_type); }

// Registers `name` and `_backward_<name>`, parsing attributes with `parse` (null: none), and
// applying the functor `pointwise` names (its kind is set here).
template <typename P>
void DefineUnaryPair(const std::string& name, const std::string& description, P (*parse)(AttrReader&),
                     PointwiseFn pointwise) {
  const std::string backward = "_backward_" + name;
  Op& fwd = RegisterOp(name);
  fwd.Describe(description).Inputs({"data"}).InferShape(SameAsInput0).Inplace({{0, 0}});
  fwd.Gradient([backward](const Attrs& a, GradBuilder& g) {
    g.SetInputGrad(0, g.Op(backward, {g.OutGrad(0), g.Input(0), g.Output(0)}, a.raw()));
  });
  Op& bwd = RegisterOp(backward);
  bwd.Describe("gradient of " + name)
      .Inputs({"out_grad", "data", "output"})
      .InferShape(BackwardShape)
      .Inplace({{0, 0}});
  if (parse != nullptr) fwd.Params(parse), bwd.Params(parse);
  pointwise.kind = PointwiseKind::kUnary;
  fwd.Pointwise(pointwise);
  pointwise.kind = PointwiseKind::kUnaryBackward;
  bwd.Pointwise(std::move(pointwise));
}

const bool defined = [] {
  using NoParams = ScalarParam (*)(AttrReader&);
#define WEFT_DEFINE_UNARY(name, functor, description, has_scalar)                 \
  DefineUnaryPair(#name, description, has_scalar ? ParseScalar : NoParams{},        \
                  PointwiseFn{PointwiseKind::kNone, "weft::fn::" #functor, nullptr, \
                              has_scalar ? ScalarOf : std::function<double(const Attrs&)>{}});
  WEFT_UNARY_OPS(WEFT_DEFINE_UNARY)
#undef WEFT_DEFINE_UNARY
  DefineUnaryPair("Activation", "elementwise activation: act_type is relu, sigmoid, tanh, softrelu or gelu",
                  ParseActivation, PointwiseFn{PointwiseKind::kNone, "", ActivationFunctorOf, nullptr});
  return true;
}();

}  // namespace
}  // namespace weft
