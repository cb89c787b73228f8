// SoftmaxCrossEntropy: per sample, the cross-entropy of softmax(data) against a class label.
//
//   data    (N, C) logits
//   label   (N,)   class indices in [0, C), stored in data's dtype
//   output  (N,)   loss[n] = -log softmax(data[n])[label[n]] = logsumexp(data[n]) - data[n, label[n]]
//
// _backward_SoftmaxCrossEntropy takes (out_grad, data, label) and gives d_data:
//   d_data[n, c] = out_grad[n] * (softmax(data[n])_c - (c == label[n] ? 1 : 0))
// The label gets no gradient. A label that is not an integer in [0, C) is a weft::Error raised
// while the op runs, so it surfaces at the output's WaitToRead. Both dtypes run the loops below
// (oneDNN has no fused op for this); each row's max is subtracted before exp.
#include <cmath>

#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Checks data (N, C) and label (N,); returns (N, C).
std::pair<int64_t, int64_t> CheckSce(const std::string& op, const Shape& data, const Shape& label) {
  if (data.ndim() != 2 || data.Size() == 0) WEFT_THROW(op << ": data must be non-empty (N, C) logits, found " << data);
  if (label != Shape{data[0]}) WEFT_THROW(op << ": label must be " << Shape{data[0]} << ", found " << label);
  return {data[0], data[1]};
}

std::vector<Shape> SceShape(const Attrs&, const std::vector<Shape>& in) {
  return {Shape{CheckSce("SoftmaxCrossEntropy", in[0], in[1]).first}};
}

// in: (out_grad, data, label).
std::vector<Shape> SceBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  const int64_t n = CheckSce("_backward_SoftmaxCrossEntropy", in[1], in[2]).first;
  if (in[0] != Shape{n}) {
    WEFT_THROW("_backward_SoftmaxCrossEntropy: out_grad must be " << Shape{n} << ", found " << in[0]);
  }
  return {in[1]};
}

// Throws, naming the op, the row and the value, at the first label that is not a class index.
template <typename T>
void CheckLabels(const std::string& op, const T* label, int64_t n, int64_t classes) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = label[i];
    if (!(v >= 0 && v < static_cast<T>(classes) && v == std::floor(v))) {
      WEFT_THROW(op << ": label of row " << i << " is " << v << ", expected a class index in [0, " << classes << ")");
    }
  }
}

// x (N, C), label (N,) -> loss (N,).
template <typename T>
void SceForwardLoops(int64_t n, int64_t c, const T* x, const T* label, T* loss) {
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      loss[i] = LogSumExp(row, c, 1) - row[static_cast<int64_t>(label[i])];
    }
  });
}

// dy (N,), x (N, C), label (N,) -> dx (N, C).
template <typename T>
void SceBackwardLoops(int64_t n, int64_t c, const T* dy, const T* x, const T* label, T* dx) {
  ParallelFor(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * c;
      const T lse = LogSumExp(row, c, 1);
      const int64_t target = static_cast<int64_t>(label[i]);
      for (int64_t k = 0; k < c; ++k) dx[i * c + k] = dy[i] * (std::exp(row[k] - lse) - (k == target ? T(1) : T(0)));
    }
  });
}

// Forward, in: (data, label), out: (loss); backward, in: (out_grad, data, label), out: (d_data).
template <bool kBackward>
void SceCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
                std::span<const TensorView> out) {
  const std::string op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const auto [n, c] = CheckSce(op, data.shape(), label.shape());
  WEFT_FLOAT_SWITCH(data.dtype(), T, op, {
    CheckLabels(op, label.data<T>(), n, c);
    if (req[0] == OpReq::kNull) return;
    StagedOutputs staged(ctx, req, out, false);
    T* target = staged.Target(0).data<T>();
    if (kBackward) {
      SceBackwardLoops(n, c, in[0].data<T>(), data.data<T>(), label.data<T>(), target);
    } else {
      SceForwardLoops(n, c, data.data<T>(), label.data<T>(), target);
    }
    staged.Finish();
  });
}

const bool registered = [] {
  WEFT_REGISTER_OP(SoftmaxCrossEntropy)
      .Describe("per-sample -log softmax(data)[label] of (N, C) logits and (N,) class indices")
      .Inputs({"data", "label"})
      .InferShape(SceShape)
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, SceCompute<false>)
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("_backward_SoftmaxCrossEntropy", {g.OutGrad(0), g.Input(0), g.Input(1)}));
      });
  WEFT_REGISTER_OP(_backward_SoftmaxCrossEntropy)
      .Describe("gradient of SoftmaxCrossEntropy with respect to data")
      .Inputs({"out_grad", "data", "label"})
      .InferShape(SceBackwardShape)
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, SceCompute<true>);
  return true;
}();

}  // namespace
}  // namespace weft::cpu
