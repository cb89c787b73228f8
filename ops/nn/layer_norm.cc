// LayerNorm: layer normalization over one axis (the last by default), MXNet's op and attribute
// names with PyTorch's numbers (torch.nn.LayerNorm over the last dimension).
//
//   data         any rank, no empty axis; normalized along `axis` (default -1; negative counts from
//                the end), seen as (outer, C, inner) (LnDimsOf, ops/nn/nn_params.h): each of the
//                outer * inner rows normalizes its C values
//   gamma, beta  (C,)   scale and shift
//   output       data's shape: y = gamma * (x - mean) * rstd + beta, per row
//   mean, rstd   data's shape with `axis` 1 (LnStatShape): hidden outputs for the backward, the
//                row's mean and rstd = 1 / sqrt(var + eps), var the biased variance (the sum of
//                (x - mean)^2 over the row divided by C, as PyTorch's). Never a copy of the input.
//
// Attributes: eps (default 1e-5, PyTorch's; > 0), axis, out_dtype (default the data's). Training
// and inference compute the same.
//
// dtypes: data and output float32, float64, bfloat16 or float16. gamma, beta, mean and rstd are
// float32 whatever data's dtype, but float64 for float64 data (BnStatType, as BatchNorm's
// statistics). out_dtype bfloat16 or float16 takes float32 data: the output is computed in float32
// and rounded once, as a Cast of it would be (the mixed-precision pass folds such a Cast into the
// op, passes/mixed_precision.h), and the backward's out_grad comes in that dtype.
//
// _backward_LayerNorm(out_grad, data, gamma, mean, rstd) gives (d_data, d_gamma, d_beta)
// (LnBackwardInput names the positions). With g = out_grad * gamma and x_hat = (x - mean) * rstd
// per row:
//   d_data  = rstd * (g - mean_row(g) - x_hat * mean_row(g * x_hat))
//   d_gamma = the sum over rows of out_grad * x_hat,   d_beta = the sum over rows of out_grad.
// Compute: ops/cpu/layer_norm.cc, ops/gpu/layer_norm.cc.
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

const char* const kInputNames[] = {"data", "gamma", "beta"};
const char* const kBackwardInputNames[] = {"out_grad", "data", "gamma", "mean", "rstd"};

LayerNormParam ParseLayerNorm(AttrReader& r) {
  LayerNormParam p{};
  p.eps = r.Float("eps", 1e-5);
  if (!(p.eps > 0 && std::isfinite(p.eps))) {
    WEFT_THROW("op '" << r.op() << "': attribute 'eps': expected a finite number > 0, found "
                      << p.eps);
  }
  p.axis = r.Int("axis", -1);
  if (!r.String("out_dtype", "").empty()) {
    p.out_dtype = r.Choice<DType>("out_dtype",
                                  {{"float32", DType::kFloat32},
                                   {"float64", DType::kFloat64},
                                   {"bfloat16", DType::kBFloat16},
                                   {"float16", DType::kFloat16}},
                                  std::nullopt);
  }
  return p;
}

// The output's dtype for data of dtype t: out_dtype, which must be t or a 16-bit float for
// float32 data.
DType OutType(const char* op, const LayerNormParam& p, DType t) {
  const DType out = p.out_dtype.value_or(t);
  if (out != t && !(t == DType::kFloat32 && Is16BitFloat(out))) {
    WEFT_THROW(op << ": out_dtype " << out
                  << " expected data of float32 (or of that dtype), found data of " << t);
  }
  return out;
}

// Each of in[first, last), named names[i], must be `want`.
void CheckShapes(const char* op, const std::vector<Shape>& in, size_t first, size_t last,
                 const char* const* names, const Shape& want, const char* what) {
  for (size_t i = first; i < last && i < in.size(); ++i) {
    if (in[i] == want) continue;
    WEFT_THROW(op << ": " << names[i] << " must be " << want << ", " << what << ", found "
                  << in[i]);
  }
}

// "one value per element of data (2, 3, 4) along axis -1"
std::string AlongAxis(const Shape& data, int axis) {
  return "one value per element of data " + data.ToString() + " along axis " + std::to_string(axis);
}

// in: (data, gamma, beta) -> (output, mean, rstd).
std::vector<Shape> LnShape(const Attrs& a, const std::vector<Shape>& in) {
  const LayerNormParam& p = a.Get<LayerNormParam>();
  const LnDims d = LnDimsOf("LayerNorm", p, in[0]);
  const std::string what = AlongAxis(in[0], p.axis);
  CheckShapes("LayerNorm", in, 1, 3, kInputNames, Shape{d.c}, what.c_str());
  const Shape stat = LnStatShape(p, in[0]);
  return {in[0], stat, stat};
}

// in: as LnBackwardInput places them -> (d_data, d_gamma, d_beta).
std::vector<Shape> LnBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const char* op = "_backward_LayerNorm";
  const LayerNormParam& p = a.Get<LayerNormParam>();
  const Shape& data = in[kLnData];
  const LnDims d = LnDimsOf(op, p, data);
  const std::string what = AlongAxis(data, p.axis);
  CheckShapes(op, in, kLnGamma, kLnGamma + 1, kBackwardInputNames, Shape{d.c}, what.c_str());
  CheckShapes(op, in, kLnOutGrad, kLnOutGrad + 1, kBackwardInputNames, data, "data's shape");
  CheckShapes(op, in, kLnMean, kLnRstd + 1, kBackwardInputNames, LnStatShape(p, data),
              "one value per row of data");
  return {data, Shape{d.c}, Shape{d.c}};
}

// gamma and beta (C,) from data.
void LnInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const LayerNormParam& p = a.Get<LayerNormParam>();
  const std::optional<Shape>& data = in[0];
  if (!data || p.axis < -data->ndim() || p.axis >= data->ndim()) return;  // LnShape says why
  const int64_t c = (*data)[p.axis < 0 ? p.axis + data->ndim() : p.axis];
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i]) in[i] = Shape{c};
  }
}

std::vector<DType> LnTypes(const Attrs& a, const std::vector<DType>& in) {
  const DType t = CheckNormTypes("LayerNorm", in, 0, 1, 3, kInputNames);
  return {OutType("LayerNorm", a.Get<LayerNormParam>(), t), BnStatType(t), BnStatType(t)};
}

std::vector<DType> LnBackwardTypes(const Attrs& a, const std::vector<DType>& in) {
  const char* op = "_backward_LayerNorm";
  const DType t = CheckNormTypes(op, in, kLnData, kLnGamma, kLnRstd + 1, kBackwardInputNames);
  const DType out = OutType(op, a.Get<LayerNormParam>(), t);
  if (in[kLnOutGrad] != out) {
    WEFT_THROW(op << ": out_grad must be " << out << ", the output's dtype, found "
                  << in[kLnOutGrad]);
  }
  return {t, BnStatType(t), BnStatType(t)};
}

// d_data, d_gamma, d_beta from one backward node, which reads the hidden mean and rstd.
void LnGradient(const Attrs& a, GradBuilder& g) {
  const GradEntry d =
      g.Op("_backward_LayerNorm", {g.OutGrad(0), g.Input(0), g.Input(1), g.Output(1), g.Output(2)},
           a.raw(), 3);
  for (int i = 0; i < 3; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
}

const bool defined = [] {
  WEFT_REGISTER_OP(LayerNorm)
      .Describe(
          "layer normalization over `axis` (default -1, the last), with scale gamma and shift "
          "beta; eps (default 1e-5) is added to the biased variance; out_dtype (bfloat16 or "
          "float16 for float32 data) rounds the output once")
      .Params(ParseLayerNorm)
      .Inputs(std::vector<std::string>(std::begin(kInputNames), std::end(kInputNames)))
      .Outputs(3)
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape(LnShape)
      .InferInputShapes(LnInputShapes)
      .InferType(LnTypes)
      .Gradient(LnGradient);
  WEFT_REGISTER_OP(_backward_LayerNorm)
      .Describe(
          "gradient of LayerNorm: (out_grad, data, gamma, mean, rstd) -> "
          "(d_data, d_gamma, d_beta)")
      .Params(ParseLayerNorm)
      .Inputs(
          std::vector<std::string>(std::begin(kBackwardInputNames), std::end(kBackwardInputNames)))
      .Outputs(3)
      .InferShape(LnBackwardShape)
      .InferType(LnBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
