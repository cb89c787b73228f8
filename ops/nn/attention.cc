// Attention: scaled dot-product attention, PyTorch's F.scaled_dot_product_attention.
//
//   q     (B, H, Tq, D)     queries
//   k     (B, H, Tk, D)     keys
//   v     (B, H, Tk, Dv)    values
//   mask  broadcastable to (B, H, Tq, Tk) (1 to 4 axes, aligned right, extent 1 broadcast); an
//         input only with use_mask. Its dtype says what it is: q's dtype, an additive mask (-inf
//         masks a key); bool or uint8, a boolean mask (nonzero: the key takes part, zero: masked,
//         as PyTorch's bool attn_mask)
//   out   (B, H, Tq, Dv)    out[i] = sum_j softmax_j(s[i, :]) v[j],
//         s[i, j] = scale * q[i] . k[j] + mask[i, j], and s[i, j] = -inf for j > i with causal
//   lse   (B, H, Tq)        hidden, for the backward: log(sum_j exp(s[i, j])) per row, float32
//         (float64 for float64 data). Never the Tq x Tk probabilities: the backward recomputes
//         them tile by tile from q, k and lse (flash attention).
//   rng   (3) int64         hidden, only with p > 0: the dropout's random key (seed, offset) and
//         whether the call applied dropout (1 in training, else 0), from which the backward
//         regenerates the mask; nothing Tq x Tk is kept.
//
// With layout = "rows" (for inference; passes/fold_attention_moves.h makes it from an Attention
// whose operands are strided copies of another value and whose out a strided copy reads), q, k
// and v are read, and out written, where the attributes say: dims (B, H, Tq, Tk, D, Dv), rows
// (offset and the strides of b, h and t for q, k, v and out; D contiguous) and out_shape, whose
// every element out's rows cover once. It has no gradient.
//
// With layout = "bt3hd", one input qkv (B, T, 3, H, D) holds q, k and v (its parts 0, 1 and 2,
// PyTorch's qkv projection (B, T, 3 H D) viewed as 5 axes), read in place through strides; Tq =
// Tk = T, Dv = D, and out is (B, T, H, D): a view of (B, T, H D) with no transpose. Its gradient
// d_qkv has qkv's layout.
//
// A row whose keys are all masked (every s[i, j] = -inf) has out 0, lse -inf and gradient 0.
// Attributes: scale (default 1 / sqrt(D)), causal (default false; key j is masked for query i
// when j > i, aligned top-left, as PyTorch's is_causal), use_mask (default false), p (default
// 0, in [0, 1): dropout on the probabilities in training, the kept ones scaled by 1 / (1 - p);
// none outside training), layout ("bhtd", the default, "bt3hd" or "rows").
//
// Dropout: probability (b, h, i, j) is kept when the Philox number ops/math/attention_dropout.h
// assigns it, from the B * H * Tq * Tk numbers of the op's random range, passes DropoutKeeps
// (core/philox.h), on every device; lse is that of the probabilities before dropout.
//
// _backward_Attention(out_grad, q, k, v | qkv, out, lse[, mask][, rng]) gives (d_q, d_k, d_v) or
// d_qkv (AttentionSlots, ops/nn/attention.h); the mask gets no gradient. With P = exp(s - lse),
// Z the kept mask times 1 / (1 - p) (1 without dropout), dP = Z * (out_grad v^T) and D_i =
// sum(out_grad[i] * out[i]): dS = P * (dP - D_i), d_q = scale * dS k, d_k = scale * dS^T q, d_v =
// (P Z)^T out_grad.
// Compute: ops/cpu/attention.cc (float32, float64, and bfloat16 with float32 arithmetic).
#include "ops/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/op.h"

namespace weft {
namespace {

// Layout kRows' attributes: dims (6 numbers), rows (16: offset, b, h, t of q, k, v, out),
// out_shape.
void ParseRows(AttrReader& r, AttentionParam& p) {
  const std::vector<int64_t> dims = r.IntList("dims", std::nullopt);
  const std::vector<int64_t> rows = r.IntList("rows", std::nullopt);
  if (dims.size() != p.dims.size() || rows.size() != 4 * p.rows.size()) {
    WEFT_THROW("op '" << r.op() << "': with layout 'rows', expected dims of 6 numbers (B, H, Tq, "
                      << "Tk, D, Dv) and rows of 16 (offset, b, h, t of q, k, v and out), found "
                      << dims.size() << " and " << rows.size());
  }
  std::copy(dims.begin(), dims.end(), p.dims.begin());
  for (size_t i = 0; i < p.rows.size(); ++i)
    p.rows[i] = {rows[4 * i], rows[4 * i + 1], rows[4 * i + 2], rows[4 * i + 3]};
  p.out_shape = r.IntList("out_shape", std::nullopt);
  if (p.out_shape.size() > Shape::kMaxDims ||
      std::ranges::any_of(p.out_shape, [](int64_t e) { return e < 0; })) {
    WEFT_THROW("op '" << r.op() << "': with layout 'rows', expected an out_shape of at most "
                      << Shape::kMaxDims << " extents >= 0, found " << p.out_shape.size()
                      << " extents");
  }
}

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
  if (!(p.p >= 0 && p.p < 1)) {
    WEFT_THROW("op '" << r.op() << "': attribute 'p': expected a dropout probability in [0, 1), "
                      << "found " << p.p);
  }
  p.layout = r.Choice<AttentionLayout>("layout",
                                       {{"bhtd", AttentionLayout::kBhtd},
                                        {"bt3hd", AttentionLayout::kBt3hd},
                                        {"rows", AttentionLayout::kRows}},
                                       AttentionLayout::kBhtd);
  if (p.layout == AttentionLayout::kRows) ParseRows(r, p);
  return p;
}

AttentionSlots SlotsOf(const Attrs& a) { return AttentionSlotsOf(a.Get<AttentionParam>()); }

std::vector<std::string> OperandNames(const AttentionSlots& s) {
  if (s.operands == 1) return {"qkv"};
  return {"q", "k", "v"};
}

std::vector<std::string> ForwardNames(const Attrs& a) {
  const AttentionSlots s = SlotsOf(a);
  std::vector<std::string> names = OperandNames(s);
  if (s.mask >= 0) names.push_back("mask");
  return names;
}

std::vector<std::string> BackwardNames(const Attrs& a) {
  const AttentionSlots s = SlotsOf(a);
  std::vector<std::string> names = {"out_grad"};
  for (const std::string& n : OperandNames(s)) names.push_back(n);
  names.insert(names.end(), {"out", "lse"});
  if (s.mask >= 0) names.push_back("mask");
  if (s.rng >= 0) names.push_back("rng");
  return names;
}

// The forward's output shapes: out (as the layout places it), lse[, rng].
std::vector<Shape> OutputShapes(const AttentionParam& p, const AttentionDims& d) {
  std::vector<Shape> out = {p.layout == AttentionLayout::kBt3hd  ? Shape{d.b, d.tq, d.h, d.dv}
                            : p.layout == AttentionLayout::kRows ? Shape(p.out_shape)
                                                                 : Shape{d.b, d.h, d.tq, d.dv},
                            Shape{d.b, d.h, d.tq}};
  if (p.p > 0) out.push_back(Shape{kAttentionRngValues});
  return out;
}

// in: the forward's inputs (AttentionSlots) -> (out, lse[, rng]).
std::vector<Shape> AttentionShape(const Attrs& a, const std::vector<Shape>& in) {
  const AttentionParam& p = a.Get<AttentionParam>();
  return OutputShapes(p, AttentionDimsOf("Attention", p, in));
}

// in: the backward's inputs (AttentionSlots) -> the operands' gradients.
std::vector<Shape> AttentionBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const char* op = "_backward_Attention";
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  std::vector<Shape> forward(in.begin() + s.Operand(0), in.begin() + s.Operand(s.operands));
  if (s.mask >= 0) forward.push_back(in[s.Mask()]);
  const std::vector<Shape> want = OutputShapes(p, AttentionDimsOf(op, p, forward));
  struct Check {
    int input;  // -1: absent
    const char* name;
    size_t output;  // the forward output it must match
  };
  for (const Check& c : {Check{s.kOutGrad, "out_grad", 0}, Check{s.Out(), "out", 0},
                         Check{s.Lse(), "lse", 1}, Check{s.Rng(), "rng", 2}}) {
    if (c.input >= 0 && in[c.input] != want[c.output])
      WEFT_THROW(op << ": " << c.name << " must be " << want[c.output] << ", found "
                    << in[c.input]);
  }
  forward.resize(s.operands);
  return forward;
}

// q's dtype (float32, float64, bfloat16 or float16), after checking that inputs `same` have it and
// that a mask (input `mask`, if any) has it or is boolean.
DType CheckAttentionTypes(const char* op, const std::vector<DType>& in, int q,
                          const std::vector<int>& same, int mask,
                          const std::vector<std::string>& names) {
  const DType t = in[q];
  if (t != DType::kFloat32 && t != DType::kFloat64 && !Is16BitFloat(t)) {
    WEFT_THROW(op << ": " << names[q] << " must be float32, float64, bfloat16 or float16, found "
                  << t);
  }
  for (int i : same) {
    if (in[i] != t)
      WEFT_THROW(op << ": " << names[i] << " must be " << t << " like " << names[q] << ", found "
                    << in[i]);
  }
  if (mask >= 0 && in[mask] != t && !AttentionMaskIsBoolean(in[mask])) {
    WEFT_THROW(op << ": mask must be " << t << " (additive) or bool or uint8 (boolean), found "
                  << in[mask]);
  }
  return t;
}

std::vector<DType> AttentionTypes(const Attrs& a, const std::vector<DType>& in) {
  const AttentionSlots s = SlotsOf(a);
  std::vector<int> same;
  for (int i = 1; i < s.operands; ++i) same.push_back(i);
  const DType t = CheckAttentionTypes("Attention", in, 0, same, s.mask, ForwardNames(a));
  std::vector<DType> out = {t, AttentionStatType(t)};
  if (s.rng >= 0) out.push_back(kAttentionRngType);
  return out;
}

// `input` of _backward_Attention must be `want`.
void CheckBackwardType(const std::vector<DType>& in, int input, DType want, const char* name) {
  if (input >= 0 && in[input] != want) {
    WEFT_THROW("_backward_Attention: " << name << " must be " << want << ", found " << in[input]);
  }
}

std::vector<DType> AttentionBackwardTypes(const Attrs& a, const std::vector<DType>& in) {
  const AttentionSlots s = SlotsOf(a);
  std::vector<int> same = {s.kOutGrad, s.Out()};
  for (int i = 1; i < s.operands; ++i) same.push_back(s.Operand(i));
  const DType t = CheckAttentionTypes("_backward_Attention", in, s.Operand(0), same, s.Mask(),
                                      BackwardNames(a));
  CheckBackwardType(in, s.Lse(), AttentionStatType(t), "lse");
  CheckBackwardType(in, s.Rng(), kAttentionRngType, "rng");
  return std::vector<DType>(s.operands, t);
}

// One 32-bit number per probability in training with dropout: B * H * Tq * Tk.
uint64_t AttentionDraws(const Attrs& a, std::span<const TensorView> in, bool is_train) {
  const AttentionParam& p = a.Get<AttentionParam>();
  if (!is_train || p.p == 0) return 0;
  std::vector<Shape> shapes;
  for (const TensorView& t : in) shapes.push_back(t.shape());
  const AttentionDims d = AttentionDimsOf("Attention", p, shapes);
  return static_cast<uint64_t>(d.Heads() * d.tq * d.tk);
}

// The operands' gradients from one backward node; the mask gets none.
void AttentionGradient(const Attrs& a, GradBuilder& g) {
  if (a.Get<AttentionParam>().layout == AttentionLayout::kRows) {
    WEFT_THROW(
        "Attention with layout 'rows' has no gradient: passes/fold_attention_moves.h makes "
        "it for inference binds; a graph to train uses layout 'bhtd' or 'bt3hd'");
  }
  const AttentionSlots s = SlotsOf(a);
  std::vector<GradEntry> in = {g.OutGrad(0)};
  for (int i = 0; i < s.operands; ++i) in.push_back(g.Input(i));
  in.insert(in.end(), {g.Output(0), g.Output(1)});
  if (s.mask >= 0) in.push_back(g.Input(s.mask));
  if (s.rng >= 0) in.push_back(g.Output(s.rng));
  const GradEntry d = g.Op("_backward_Attention", std::move(in), a.raw(), s.operands);
  for (int i = 0; i < s.operands; ++i) g.SetInputGrad(i, g.NodeOutput(d, i));
}

const bool defined = [] {
  WEFT_REGISTER_OP(Attention)
      .Describe(
          "scaled dot-product attention softmax(scale * q k^T + mask) v over q (B, H, Tq, D), "
          "k (B, H, Tk, D), v (B, H, Tk, Dv), or one qkv (B, T, 3, H, D) with layout 'bt3hd'; "
          "scale (default 1/sqrt(D)), causal, use_mask (an additive or boolean mask input "
          "broadcast to (B, H, Tq, Tk)), p (dropout on the probabilities in training); keeps "
          "the log-sum-exp per row")
      .Params(ParseAttention)
      .Inputs(std::function<std::vector<std::string>(const Attrs&)>(ForwardNames))
      .VariadicInputs([](const Attrs& a) { return SlotsOf(a).inputs; })
      .Outputs([](const Attrs& a) { return SlotsOf(a).outputs; })
      .VisibleOutputs([](const Attrs&) { return 1; })
      .InferShape(AttentionShape)
      .InferType(AttentionTypes)
      .Random(AttentionDraws)
      .Gradient(AttentionGradient);
  WEFT_REGISTER_OP(_backward_Attention)
      .Describe(
          "gradient of Attention: (out_grad, q, k, v | qkv, out, lse[, mask][, rng]) -> (d_q, "
          "d_k, d_v | d_qkv)")
      .Params(ParseAttention)
      .Inputs(std::function<std::vector<std::string>(const Attrs&)>(BackwardNames))
      .VariadicInputs([](const Attrs& a) { return SlotsOf(a).BackwardInputs(); })
      .Outputs([](const Attrs& a) { return SlotsOf(a).operands; })
      .InferShape(AttentionBackwardShape)
      .InferType(AttentionBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
