// SoftmaxCrossEntropy: per sample, the cross-entropy of softmax(data) against a class label.
//
//   data    (N, C) logits
//   label   (N,)   class indices in [0, C), stored in data's dtype
//   output  (N,)   loss[n] = -log softmax(data[n])[label[n]] = logsumexp(data[n]) - data[n,
//   label[n]]
//   lse     (N,)   logsumexp(data[n]): a hidden output for the backward, in the statistics' dtype
//                  (float32 for bfloat16 data, as BnStatType says), so that the backward reads
//                  each row once instead of recomputing its maximum and sum
//
// _backward_SoftmaxCrossEntropy takes (out_grad, data, label, lse) and gives d_data:
//   d_data[n, c] = out_grad[n] * (exp(data[n, c] - lse[n]) - (c == label[n] ? 1 : 0))
// (softmax(data[n])_c - onehot).
// The label gets no gradient. A label that is not an integer in [0, C) is found while the op runs
// (each device's compute says what it does then). Compute: ops/cpu/softmax_cross_entropy.cc,
// ops/gpu/softmax_cross_entropy.cc.
#include <string>

#include "core/error.h"
#include "ops/nn/nn_params.h"
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
  const int64_t n = CheckSce("SoftmaxCrossEntropy", in[0], in[1]);
  return {Shape{n}, Shape{n}};
}

std::vector<DType> SceTypes(const Attrs&, const std::vector<DType>& in) {
  return {in[0], BnStatType(in[0])};
}

// in: (out_grad, data, label, lse).
std::vector<Shape> SceBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  const int64_t n = CheckSce("_backward_SoftmaxCrossEntropy", in[1], in[2]);
  for (int i : {0, 3}) {
    if (in[i] != Shape{n}) {
      WEFT_THROW("_backward_SoftmaxCrossEntropy: " << (i == 0 ? "out_grad" : "lse") << " must be "
                                                   << Shape{n} << ", found " << in[i]);
    }
  }
  return {in[1]};
}

std::vector<DType> SceBackwardTypes(const Attrs&, const std::vector<DType>& in) {
  if (in[3] != BnStatType(in[1])) {
    WEFT_THROW("_backward_SoftmaxCrossEntropy: lse must be " << BnStatType(in[1]) << " for "
                                                             << in[1] << " data, found " << in[3]);
  }
  return {in[1]};
}

const bool defined = [] {
  WEFT_REGISTER_OP(SoftmaxCrossEntropy)
      .Describe("per-sample -log softmax(data)[label] of (N, C) logits and (N,) class indices")
      .Inputs({"data", "label"})
      .Outputs(2)
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape(SceShape)
      .InferType(SceTypes)
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("_backward_SoftmaxCrossEntropy",
                               {g.OutGrad(0), g.Input(0), g.Input(1), g.Output(1)}));
      });
  WEFT_REGISTER_OP(_backward_SoftmaxCrossEntropy)
      .Describe("gradient of SoftmaxCrossEntropy with respect to data")
      .Inputs({"out_grad", "data", "label", "lse"})
      .InferShape(SceBackwardShape)
      .InferType(SceBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
