// Attention: scaled dot-product attention, PyTorch's F.scaled_dot_product_attention.
//
//   q     (B, H, Tq, D)     queries
//   k     (B, H, Tk, D)     keys
//   v     (B, H, Tk, Dv)    values
//   mask  broadcastable to (B, H, Tq, Tk) (1 to 4 axes, aligned right, extent 1 broadcast), an
//         additive float mask (-inf masks a key), q's dtype; an input only with use_mask
//   out   (B, H, Tq, Dv)    out[i] = sum_j softmax_j(s[i, :]) v[j],
//         s[i, j] = scale * q[i] . k[j] + mask[i, j], and s[i, j] = -inf for j > i with causal
//   lse   (B, H, Tq)        hidden, for the backward: log(sum_j exp(s[i, j])) per row, float32
//         (float64 for float64 data). Never the Tq x Tk probabilities: the backward recomputes
//         them tile by tile from q, k and lse (flash attention).
//
// A row whose keys are all masked (every s[i, j] = -inf) has out 0, lse -inf and gradient 0.
// Attributes: scale (default 1 / sqrt(D)), causal (default false; key j is masked for query i
// when j > i, aligned top-left, as PyTorch's is_causal), use_mask (default false), p (dropout on
// the probabilities in training: not supported yet, only 0 is accepted).
//
// _backward_Attention(out_grad, q, k, v, out, lse[, mask]) gives (d_q, d_k, d_v); the mask gets
// no gradient. With P = exp(s - lse), dP = out_grad v^T and D_i = sum(out_grad[i] * out[i]):
// dS = P * (dP - D_i), d_q = scale * dS k, d_k = scale * dS^T q, d_v = P^T out_grad.
// Compute: ops/cpu/attention.cc (float32, float64).
#include "ops/nn/attention.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/op.h"

namespace weft {
namespace {

// _backward_Attention's inputs.
enum AttentionBackwardInput { kOutGrad, kQ, kK, kV, kOut, kLse, kMask };

AttentionParam ParseAttention(AttrReader& r) {
  AttentionParam p{};
  if (!r.String("scale", "").empty()) {  // given: any number but NaN and infinities
    const double scale = r.Float("scale", std::nullopt);
    if (!std::isfinite(scale)) {
      WEFT_THROW("op '" << r.op() << "': attribute 'scale': expected a finite number, found "
                        << scale);
    }
    p.scale = scale;
  }
  p.causal = r.Bool("causal", false);
  p.use_mask = r.Bool("use_mask", false);
  p.p = r.Float("p", 0.0);
  if (p.p != 0) {
    WEFT_THROW("op '" << r.op() << "': attribute 'p': dropout on the attention probabilities is "
                      << "not supported yet: expected 0, found " << p.p);
  }
  return p;
}

std::vector<std::string> ForwardNames(const Attrs& a) {
  std::vector<std::string> names = {"q", "k", "v"};
  if (a.Get<AttentionParam>().use_mask) names.push_back("mask");
  return names;
}

std::vector<std::string> BackwardNames(const Attrs& a) {
  std::vector<std::string> names = {"out_grad", "q", "k", "v", "out", "lse"};
  if (a.Get<AttentionParam>().use_mask) names.push_back("mask");
  return names;
}

// in: (q, k, v[, mask]) -> (out, lse).
std::vector<Shape> AttentionShape(const Attrs& a, const std::vector<Shape>& in) {
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionDims d =
      AttentionDimsOf("Attention", p, in[0], in[1], in[2], p.use_mask ? &in[3] : nullptr);
  return {Shape{d.b, d.h, d.tq, d.dv}, Shape{d.b, d.h, d.tq}};
}

// in: as AttentionBackwardInput places them -> (d_q, d_k, d_v).
std::vector<Shape> AttentionBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const char* op = "_backward_Attention";
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionDims d =
      AttentionDimsOf(op, p, in[kQ], in[kK], in[kV], p.use_mask ? &in[kMask] : nullptr);
  const Shape out{d.b, d.h, d.tq, d.dv}, lse{d.b, d.h, d.tq};
  if (in[kOutGrad] != out) WEFT_THROW(op << ": out_grad must be " << out << ", found " << in[0]);
  if (in[kOut] != out) WEFT_THROW(op << ": out must be " << out << ", found " << in[kOut]);
  if (in[kLse] != lse) WEFT_THROW(op << ": lse must be " << lse << ", found " << in[kLse]);
  return {in[kQ], in[kK], in[kV]};
}

// Each of in[first, last) must have q's dtype (float32, float64 or bfloat16).
DType CheckAttentionTypes(const char* op, const std::vector<DType>& in, size_t q,
                          const std::vector<size_t>& same, const std::vector<std::string>& names) {
  const DType t = in[q];
  if (t != DType::kFloat32 && t != DType::kFloat64 && t != DType::kBFloat16)
    WEFT_THROW(op << ": q must be float32, float64 or bfloat16, found " << t);
  for (size_t i : same) {
    if (i < in.size() && in[i] != t) {
      WEFT_THROW(op << ": " << names[i] << " must be " << t << " like q, found " << in[i]);
    }
  }
  return t;
}

std::vector<DType> AttentionTypes(const Attrs& a, const std::vector<DType>& in) {
  const DType t = CheckAttentionTypes("Attention", in, 0, {1, 2, 3}, ForwardNames(a));
  return {t, AttentionStatType(t)};
}

std::vector<DType> AttentionBackwardTypes(const Attrs& a, const std::vector<DType>& in) {
  const char* op = "_backward_Attention";
  const DType t =
      CheckAttentionTypes(op, in, kQ, {kOutGrad, kK, kV, kOut, kMask}, BackwardNames(a));
  if (in[kLse] != AttentionStatType(t)) {
    WEFT_THROW(op << ": lse must be " << AttentionStatType(t) << " for " << t << " data, found "
                  << in[kLse]);
  }
  return {t, t, t};
}

int ForwardInputs(const Attrs& a) { return a.Get<AttentionParam>().use_mask ? 4 : 3; }
int BackwardInputs(const Attrs& a) { return a.Get<AttentionParam>().use_mask ? 7 : 6; }

// d_q, d_k, d_v from one backward node; the mask gets none.
void AttentionGradient(const Attrs& a, GradBuilder& g) {
  std::vector<GradEntry> in = {g.OutGrad(0), g.Input(0),  g.Input(1),
                               g.Input(2),   g.Output(0), g.Output(1)};
  if (a.Get<AttentionParam>().use_mask) in.push_back(g.Input(3));
  const GradEntry d = g.Op("_backward_Attention", std::move(in), a.raw(), 3);
  for (int i = 0; i < 3; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
}

const bool defined = [] {
  WEFT_REGISTER_OP(Attention)
      .Describe(
          "scaled dot-product attention softmax(scale * q k^T + mask) v over q (B, H, Tq, D), "
          "k (B, H, Tk, D), v (B, H, Tk, Dv); scale (default 1/sqrt(D)), causal, use_mask (an "
          "additive mask input broadcast to (B, H, Tq, Tk)); keeps the log-sum-exp per row")
      .Params(ParseAttention)
      .Inputs(std::function<std::vector<std::string>(const Attrs&)>(ForwardNames))
      .VariadicInputs(ForwardInputs)
      .Outputs(2)
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape(AttentionShape)
      .InferType(AttentionTypes)
      .Gradient(AttentionGradient);
  WEFT_REGISTER_OP(_backward_Attention)
      .Describe("gradient of Attention: (out_grad, q, k, v, out, lse[, mask]) -> (d_q, d_k, d_v)")
      .Params(ParseAttention)
      .Inputs(std::function<std::vector<std::string>(const Attrs&)>(BackwardNames))
      .VariadicInputs(BackwardInputs)
      .Outputs(3)
      .InferShape(AttentionBackwardShape)
      .InferType(AttentionBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
