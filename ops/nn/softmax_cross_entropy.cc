// SoftmaxCrossEntropy: per sample, the cross-entropy of softmax(data) against a class label.
//
//   data    (N, C) logits
//   label   (N,)   class indices in [0, C), stored in data's dtype
//   output  (N,)   loss[n] = -log softmax(data[n])[label[n]] = logsumexp(data[n]) - data[n,
//   label[n]]
//
// _backward_SoftmaxCrossEntropy takes (out_grad, data, label) and gives d_data:
//   d_data[n, c] = out_grad[n] * (softmax(data[n])_c - (c == label[n] ? 1 : 0))
// The label gets no gradient. A label that is not an integer in [0, C) is found while the op runs
// (each device's compute says what it does then). Compute: ops/cpu/softmax_cross_entropy.cc,
// ops/gpu/softmax_cross_entropy.cc.
#include <string>

#include "core/error.h"
#include "ops/op.h"

namespace weft {
namespace {

// Checks data (N, C) and label (N,); returns N.
int64_t CheckSce(const std::string& op, const Shape& data, const Shape& label) {
  if (data.ndim() != 2 || data.Size() == 0)
    WEFT_THROW(op << ": data must be non-empty (N, C) logits, found " << data);
  if (label != Shape{data[0]})
    WEFT_THROW(op << ": label must be " << Shape{data[0]} << ", found " << label);
  return data[0];
}

std::vector<Shape> SceShape(const Attrs&, const std::vector<Shape>& in) {
  return {Shape{CheckSce("SoftmaxCrossEntropy", in[0], in[1])}};
}

// in: (out_grad, data, label).
std::vector<Shape> SceBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  const int64_t n = CheckSce("_backward_SoftmaxCrossEntropy", in[1], in[2]);
  if (in[0] != Shape{n}) {
    WEFT_THROW("_backward_SoftmaxCrossEntropy: out_grad must be " << Shape{n} << ", found "
                                                                  << in[0]);
  }
  return {in[1]};
}

const bool defined = [] {
  WEFT_REGISTER_OP(SoftmaxCrossEntropy)
      .Describe("per-sample -log softmax(data)[label] of (N, C) logits and (N,) class indices")
      .Inputs({"data", "label"})
      .InferShape(SceShape)
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(
            0, g.Op("_backward_SoftmaxCrossEntropy", {g.OutGrad(0), g.Input(0), g.Input(1)}));
      });
  WEFT_REGISTER_OP(_backward_SoftmaxCrossEntropy)
      .Describe("gradient of SoftmaxCrossEntropy with respect to data")
      .Inputs({"out_grad", "data", "label"})
      .InferShape(SceBackwardShape);
  return true;
}();

}  // namespace
}  // namespace weft
