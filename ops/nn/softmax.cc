// softmax and log_softmax along one axis.
//
//   data    any non-empty shape; attribute axis (default -1) picks the axis normalized along
//   output  data's shape
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)         m = max_j x_j (for stability)
//   log_softmax(x)_i = x_i - m - log(sum_j exp(x_j - m))
//
// _backward_softmax and _backward_log_softmax take (out_grad, output) and give d_data:
//   softmax:      dx = y * (dy - sum(dy * y))
//   log_softmax:  dx = dy - exp(y) * sum(dy)
// The forward may write over data and the backward over out_grad (in place).
// Compute: ops/cpu/softmax.cc, ops/gpu/softmax.cc.
#include <string>

#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

SoftmaxParam ParseSoftmax(AttrReader& r) { return {r.Int("axis", -1)}; }

ShapeFn SoftmaxShape(const std::string& op) {
  return [op](const Attrs& a, const std::vector<Shape>& in) {
    if (in[0].ndim() < 1 || in[0].Size() == 0) {
      WEFT_THROW(op << ": data must be a non-empty array with at least one axis, found " << in[0]);
    }
    NormalizeAxis(op, a.Get<SoftmaxParam>().axis, in[0].ndim(), in[0]);
    return std::vector<Shape>{in[0]};
  };
}

// in: (out_grad, output).
ShapeFn SoftmaxBackwardShape(const std::string& op) {
  return [op](const Attrs& a, const std::vector<Shape>& in) {
    if (in[0] != in[1])
      WEFT_THROW(op << ": out_grad must have the output's shape " << in[1] << ", found " << in[0]);
    return SoftmaxShape(op)(a, {in[1]});
  };
}

void DefineSoftmax(const std::string& name, const std::string& description) {
  const std::string backward = "_backward_" + name;
  RegisterOp(name)
      .Describe(description)
      .Params(ParseSoftmax)
      .Inputs({"data"})
      .InferShape(SoftmaxShape(name))
      .Inplace({{0, 0}})
      .Gradient([backward](const Attrs& a, GradBuilder& g) {
        g.SetInputGrad(0, g.Op(backward, {g.OutGrad(0), g.Output(0)}, a.raw()));
      });
  RegisterOp(backward)
      .Describe("gradient of " + name)
      .Params(ParseSoftmax)
      .Inputs({"out_grad", "output"})
      .InferShape(SoftmaxBackwardShape(backward))
      .Inplace({{0, 0}});
}

const bool defined = [] {
  DefineSoftmax("softmax", "exp(x) / sum(exp(x)) along axis (default -1)");
  DefineSoftmax("log_softmax", "x - log(sum(exp(x))) along axis (default -1)");
  return true;
}();

}  // namespace
}  // namespace weft
