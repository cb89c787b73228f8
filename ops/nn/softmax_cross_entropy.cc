// SoftmaxCrossEntropy: per sample, the cross-entropy of softmax(data) against a class label.
//
//   data    (N, C) logits, float32, float64 or 16-bit (computed in float)
//   label   (N,)   class indices in [0, C), in data's dtype or float32 (bfloat16 holds integers
//                  exactly only up to 256: a vocabulary's labels stay float32 beside 16-bit logits)
//   output  (N,)   loss[n] = -log softmax(data[n])[label[n]] = logsumexp(data[n]) - data[n,
//                  label[n]], in the statistics' dtype (float32 for 16-bit data, as BnStatType
//                  says)
//   lse     (N,)   logsumexp(data[n]): a hidden output for the backward, in the statistics' dtype,
//                  so that the backward reads each row once instead of recomputing its maximum
//                  and sum
//
// So 16-bit logits need no cast to float32 before the loss (which would write and read the
// (N, C) logits twice more: GPT-2's are 8192 x 50304), and their gradient comes out 16-bit.
//
// _backward_SoftmaxCrossEntropy takes (out_grad, data, label, lse), out_grad and lse in the
// statistics' dtype, and gives d_data in data's:
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

// Checks the label's dtype against data's (in[data], in[label]); returns the statistics' dtype.
DType CheckSceTypes(const char* op, DType data, DType label) {
  if (label != data && label != DType::kFloat32) {
    if (data == DType::kFloat32) WEFT_THROW(op << ": label must be float32, found " << label);
    WEFT_THROW(op << ": label must be " << data << " (the data's dtype) or float32, found "
                  << label);
  }
  return BnStatType(data);
}

std::vector<DType> SceTypes(const Attrs&, const std::vector<DType>& in) {
  const DType stat = CheckSceTypes("SoftmaxCrossEntropy", in[0], in[1]);
  return {stat, stat};
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
  const char* op = "_backward_SoftmaxCrossEntropy";
  const DType stat = CheckSceTypes(op, in[1], in[2]);
  for (int i : {0, 3}) {
    if (in[i] != stat) {
      WEFT_THROW(op << ": " << (i == 0 ? "out_grad" : "lse") << " must be " << stat << " for "
                    << in[1] << " data, found " << in[i]);
    }
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
