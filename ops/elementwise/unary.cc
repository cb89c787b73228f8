// The elementwise unary ops of unary_ops.h, their *_scalar forms, Activation, clip, gelu, and their
// backward ops: attributes, shapes, gradients and the functor each applies. The backward op
// `_backward_<name>` takes dy and what F::Grad reads (F::kGradReads: x, y or nothing) and gives
// dx = fn::BackwardOf<F>(dy, x or y, scalar).
// Compute: ops/cpu/unary.cc, ops/gpu/unary.cc; math: ops/math/unary.h.
#include "ops/math/unary.h"

#include <string>

#include "ops/elementwise/unary_ops.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"

namespace weft {
namespace {

ScalarParam ParseScalar(AttrReader& r) { return {r.Float("scalar", std::nullopt)}; }

ClipParam ParseClip(AttrReader& r) {
  const ClipParam p{r.Float("a_min", std::nullopt), r.Float("a_max", std::nullopt)};
  if (!(p.a_min <= p.a_max)) {
    WEFT_THROW("op '" << r.op() << "': attributes 'a_min' and 'a_max': expected a_min <= a_max, "
                      << "found " << p.a_min << " and " << p.a_max);
  }
  return p;
}

ActivationParam ParseActivation(AttrReader& r) { return {ReadActType(r, std::nullopt)}; }

GeluParam ParseGelu(AttrReader& r) {
  return {r.Choice<GeluApproximate>(
      "approximate", {{"none", GeluApproximate::kNone}, {"tanh", GeluApproximate::kTanh}},
      GeluApproximate::kNone)};
}

std::vector<Shape> SameAsInput0(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

// (dy) or (dy, x) or (dy, y), of one shape.
std::vector<Shape> BackwardShape(const Attrs&, const std::vector<Shape>& in) {
  if (in.size() > 1)
    CheckSameShape(in[0], in[1], "the output gradient and the value its gradient reads");
  return {in[0]};
}

using GradReadsOf = fn::GradReads (*)(const Attrs&);

template <typename F>
fn::GradReads FunctorGradReads(const Attrs&) {
  return F::kGradReads;
}

fn::GradReads ActivationGradReads(const Attrs& a) {
  return ActivationGradReads(a.Get<ActivationParam>().act_type);
}

std::vector<std::string> BackwardInputNames(fn::GradReads reads) {
  switch (reads) {
    case fn::GradReads::kNothing:
      return {"out_grad"};
    case fn::GradReads::kInput:
      return {"out_grad", "data"};
    case fn::GradReads::kOutput:
      return {"out_grad", "output"};
  }
  return {};
}

std::string ActivationFunctorOf(const Attrs& a) {
  return ActivationFunctor(a.Get<ActivationParam>().act_type);
}

std::string GeluFunctorOf(const Attrs& a) { return GeluFunctor(a.Get<GeluParam>()); }
static_assert(fn::Gelu::kGradReads == fn::GeluTanh::kGradReads,
              "_backward_gelu takes the same inputs for either formula");

// Registers `name` and `_backward_<name>`, parsing attributes with `parse` (null: none), and
// applying the functor `pointwise` names (its kind is set here), whose Grad reads what `reads`
// says for the op's attributes.
template <typename P>
void DefineUnaryPair(const std::string& name, const std::string& description,
                     P (*parse)(AttrReader&), PointwiseFn pointwise, GradReadsOf reads) {
  const std::string backward = "_backward_" + name;
  Op& fwd = RegisterOp(name);
  fwd.Describe(description).Inputs({"data"}).InferShape(SameAsInput0).Inplace({{0, 0}});
  fwd.Gradient([backward, reads](const Attrs& a, GradBuilder& g) {
    std::vector<GradEntry> in = {g.OutGrad(0)};
    const fn::GradReads r = reads(a);
    if (r == fn::GradReads::kInput) in.push_back(g.Input(0));
    if (r == fn::GradReads::kOutput) in.push_back(g.Output(0));
    g.SetInputGrad(0, g.Op(backward, in, a.raw()));
  });
  Op& bwd = RegisterOp(backward);
  bwd.Describe("gradient of " + name)
      .Inputs([reads](const Attrs& a) { return BackwardInputNames(reads(a)); })
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
  using ScalarsFn = std::function<PointwiseScalars(const Attrs&)>;
#define WEFT_DEFINE_UNARY(name, functor, description, has_scalar)                   \
  DefineUnaryPair(#name, description, has_scalar ? ParseScalar : NoParams{},        \
                  PointwiseFn{PointwiseKind::kNone, "weft::fn::" #functor, nullptr, \
                              has_scalar ? AttrScalars<ScalarParam> : ScalarsFn{}}, \
                  FunctorGradReads<fn::functor>);
  WEFT_UNARY_OPS(WEFT_DEFINE_UNARY)
#undef WEFT_DEFINE_UNARY
  DefineUnaryPair(
      "Activation", "elementwise activation: act_type is relu, sigmoid, tanh, softrelu or gelu",
      ParseActivation, PointwiseFn{PointwiseKind::kNone, "", ActivationFunctorOf, nullptr},
      ActivationGradReads);
  DefineUnaryPair("gelu",
                  "x Phi(x), Phi the standard normal CDF: 0.5 x (1 + erf(x / sqrt(2))); with "
                  "approximate=tanh, GPT-2's 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), "
                  "as PyTorch's gelu",
                  ParseGelu, PointwiseFn{PointwiseKind::kNone, "", GeluFunctorOf, nullptr},
                  FunctorGradReads<fn::Gelu>);
  DefineUnaryPair(
      "clip",
      "min(max(x, a_min), a_max), as MXNet's clip and PyTorch's clamp (ReLU6 is "
      "clip(x, 0, 6)); the gradient passes where a_min <= x <= a_max",
      ParseClip,
      PointwiseFn{PointwiseKind::kNone, "weft::fn::Clip", nullptr, AttrScalars<ClipParam>},
      FunctorGradReads<fn::Clip>);
  return true;
}();

}  // namespace
}  // namespace weft
