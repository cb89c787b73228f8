// BatchNorm: batch normalization over every axis but the channel axis, MXNet's op and attribute
// names with PyTorch's numbers (torch.nn.BatchNorm1d/2d/3d).
//
//   data         rank 2 to 5, channel axis `axis` (default 1; negative counts from the end), seen
//                as (outer, C, inner) (BnDimsOf, ops/nn/nn_params.h)
//   gamma, beta  (C,)   scale and shift
//   moving_mean, moving_var  (C,)   running statistics, updated in place in training (mutated
//                inputs: auxiliary state, never given gradients, never merged by CSE)
//   output       data's shape: y = act(gamma * (x - mean) / sqrt(var + eps) + beta)
//   saved_mean, saved_invstd  (C,)   hidden outputs for the backward: the mean and
//                1 / sqrt(var + eps) the forward normalized with
//
// Which statistics: in training (OpContext::is_train) without use_global_stats, the batch's mean
// and biased variance (sum of (x - mean)^2 over the outer * inner values of a channel, divided by
// their count), and the running statistics move towards the batch's with the unbiased variance:
//   moving_mean = momentum * moving_mean + (1 - momentum) * mean
//   moving_var  = momentum * moving_var  + (1 - momentum) * var * n / (n - 1)
// This is MXNet's momentum convention (default 0.9): PyTorch's momentum m is 1 - m here, so its
// default 0.1 is this default 0.9. Otherwise (inference, or use_global_stats) the op normalizes
// with moving_mean and moving_var and leaves them as they are.
//
// Attributes: eps (default 1e-5, as PyTorch's; > 0), momentum (default 0.9, in [0, 1]),
// fix_gamma (default false; true: gamma is read as 1 and its gradient is 0, PyTorch's affine=False
// scale, while beta still shifts), use_global_stats (default false), axis, act_type ("none" or
// "relu": the relu fused after the affine step), layout ("NCHW", the default, or "NCHW16c": set by
// the blocked-layout pass on the CPU, for 4-D data over axis 1, which then lies as
// ops/nn/window2d.h says).
//
// dtypes: data and output float32, float64, bfloat16 or float16. gamma, beta, the moving and the
// saved statistics are float32 whatever data's dtype, but float64 for float64 data (BnStatType):
// float64 runs exist for exactness (finite differences), which float32 statistics would defeat.
//
// _backward_BatchNorm(out_grad, data, gamma, beta, saved_mean, saved_invstd[, output]) gives
// (d_data, d_gamma, d_beta) (BnBackwardInput names the positions); output (to mask relu's
// gradient: y > 0 exactly where the relu passed) only with act_type relu. beta is not read by the
// math: oneDNN's backward takes it. Its mode is its OpContext::is_train, as MXNet's: a backward
// after a training forward is one with is_train (Executor::Backward; InvokeBackward is told), and
// differentiates the batch statistics too; outside training, or with use_global_stats, the
// statistics are constants and d_data = gamma * saved_invstd * out_grad (PyTorch's eval-mode
// gradient). In both, d_gamma = sum(out_grad * x_hat) (0 with fix_gamma) and d_beta = sum(out_grad)
// per channel, with x_hat = (x - saved_mean) * saved_invstd and out_grad masked by relu. Compute:
// ops/cpu/batch_norm.cc, ops/gpu/batch_norm.cc.
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

const char* const kInputNames[] = {"data", "gamma", "beta", "moving_mean", "moving_var"};
const char* const kBackwardInputNames[] = {"out_grad",   "data",         "gamma", "beta",
                                           "saved_mean", "saved_invstd", "output"};

// The names of an array of them.
template <size_t N>
std::vector<std::string> NamesOf(const char* const (&names)[N]) {
  return {names, names + N};
}

BatchNormParam ParseBatchNorm(AttrReader& r) {
  BatchNormParam p{};
  p.eps = r.Float("eps", 1e-5);
  if (!(p.eps > 0 && std::isfinite(p.eps))) {
    WEFT_THROW("op '" << r.op() << "': attribute 'eps': expected a finite number > 0, found "
                      << p.eps);
  }
  p.momentum = r.Float("momentum", 0.9);
  if (!(p.momentum >= 0 && p.momentum <= 1)) {
    WEFT_THROW("op '" << r.op() << "': attribute 'momentum': expected a number in [0, 1], found "
                      << p.momentum);
  }
  p.fix_gamma = r.Bool("fix_gamma", false);
  p.use_global_stats = r.Bool("use_global_stats", false);
  p.axis = r.Int("axis", 1);
  p.act =
      r.Choice<BnAct>("act_type", {{"none", BnAct::kNone}, {"relu", BnAct::kRelu}}, BnAct::kNone);
  p.blocked = r.Choice<bool>("layout", {{"NCHW", false}, {"NCHW16c", true}}, false);
  return p;
}

// Each of in[first, last) named names[i] must be (C,).
void CheckChannelShapes(const char* op, const BnDims& d, const std::vector<Shape>& in, size_t first,
                        size_t last, const char* const* names, const Shape& data, int axis) {
  for (size_t i = first; i < last; ++i) {
    if (in[i] == Shape{d.c}) continue;
    WEFT_THROW(op << ": " << names[i] << " must be " << Shape{d.c}
                  << ", one value per channel of data " << data << " along axis " << axis
                  << ", found " << in[i]);
  }
}

// in: (data, gamma, beta, moving_mean, moving_var) -> (output, saved_mean, saved_invstd).
std::vector<Shape> BnShape(const Attrs& a, const std::vector<Shape>& in) {
  const BatchNormParam& p = a.Get<BatchNormParam>();
  const BnDims d = BnDimsOf("BatchNorm", p, in[0]);
  CheckChannelShapes("BatchNorm", d, in, 1, 5, kInputNames, in[0], p.axis);
  return {in[0], Shape{d.c}, Shape{d.c}};
}

// in: as BnBackwardInput places them -> (d_data, d_gamma, d_beta).
std::vector<Shape> BnBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const char* op = "_backward_BatchNorm";
  const BatchNormParam& p = a.Get<BatchNormParam>();
  const Shape& data = in[kBnData];
  const BnDims d = BnDimsOf(op, p, data);
  CheckChannelShapes(op, d, in, kBnGamma, kBnOutput, kBackwardInputNames, data, p.axis);
  for (size_t i : {size_t{kBnOutGrad}, size_t{kBnOutput}}) {
    if (i < in.size() && in[i] != data) {
      WEFT_THROW(op << ": " << kBackwardInputNames[i] << " must have data's shape " << data
                    << ", found " << in[i]);
    }
  }
  return {data, Shape{d.c}, Shape{d.c}};
}

// gamma, beta, moving_mean and moving_var (C,) from data.
void BnInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const BatchNormParam& p = a.Get<BatchNormParam>();
  const std::optional<Shape>& data = in[0];
  if (!data || data->ndim() < 2 || data->ndim() > 5 || p.axis < -data->ndim() ||
      p.axis >= data->ndim())
    return;  // BnShape says what is wrong
  const int64_t c = (*data)[p.axis < 0 ? p.axis + data->ndim() : p.axis];
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i]) in[i] = Shape{c};
  }
}

std::vector<DType> BnTypes(const Attrs&, const std::vector<DType>& in) {
  const DType t = CheckNormTypes("BatchNorm", in, 0, 1, 5, kInputNames);
  return {t, BnStatType(t), BnStatType(t)};
}

std::vector<DType> BnBackwardTypes(const Attrs&, const std::vector<DType>& in) {
  const char* op = "_backward_BatchNorm";
  const DType t = CheckNormTypes(op, in, kBnData, kBnGamma, kBnOutput, kBackwardInputNames);
  for (size_t i : {size_t{kBnOutGrad}, size_t{kBnOutput}}) {
    if (i < in.size() && in[i] != t) {
      WEFT_THROW(op << ": " << kBackwardInputNames[i] << " must be " << t << " like data, found "
                    << in[i]);
    }
  }
  return {t, BnStatType(t), BnStatType(t)};
}

int BackwardInputs(const Attrs& a) {
  return a.Get<BatchNormParam>().act == BnAct::kRelu ? kBnOutput + 1 : kBnOutput;
}

// d_data, d_gamma, d_beta from one backward node; moving_mean and moving_var get none.
void BnGradient(const Attrs& a, GradBuilder& g) {
  std::vector<GradEntry> in = {g.OutGrad(0), g.Input(0),  g.Input(1),
                               g.Input(2),   g.Output(1), g.Output(2)};
  if (BackwardInputs(a) > kBnOutput) in.push_back(g.Output(0));
  const GradEntry d = g.Op("_backward_BatchNorm", std::move(in), a.raw(), 3);
  for (int i = 0; i < 3; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
}

const bool defined = [] {
  WEFT_REGISTER_OP(BatchNorm)
      .Describe(
          "batch normalization over every axis but `axis` (default 1), with scale gamma, shift "
          "beta and running statistics moving_mean, moving_var updated in training "
          "(momentum 0.9 = PyTorch's 0.1), optionally followed by relu (act_type)")
      .Params(ParseBatchNorm)
      .Inputs(NamesOf(kInputNames))
      .Outputs(3)
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape(BnShape)
      .InferInputShapes(BnInputShapes)
      .InferType(BnTypes)
      .MutateInputs({3, 4})
      .Gradient(BnGradient);
  WEFT_REGISTER_OP(_backward_BatchNorm)
      .Describe(
          "gradient of BatchNorm: (out_grad, data, gamma, beta, saved_mean, saved_invstd[, "
          "output]) -> (d_data, d_gamma, d_beta)")
      .Params(ParseBatchNorm)
      .Inputs(NamesOf(kBackwardInputNames))
      .VariadicInputs(BackwardInputs)
      .Outputs(3)
      .InferShape(BnBackwardShape)
      .InferType(BnBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
