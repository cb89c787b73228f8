// Scaled dot-product attention as exporters write it out, folded back into one Attention at
// import, as ONNX Runtime's attention fusion does when it loads a model:
//   - PyTorch 2's TorchScript export of F.scaled_dot_product_attention (and of
//     nn.MultiheadAttention, which calls it): q and k^T each times sqrt(scale), MatMul, Add of the
//     mask, Softmax, MatMul with v;
//   - PyTorch 1.13's of nn.MultiheadAttention: q divided by sqrt(D), MatMul with a transposed k,
//     the product times 1, Add of the mask (itself times 1), Softmax, MatMul with v;
//   - a mask written as masked_fill (Where(condition, -inf, scores), PyTorch's causal mask):
//     the additive mask where(condition, -inf, 0).
// Each node still converts as before and records on its value what step of the pattern it is
// (importer.h's AttentionStep): a Mul or Div by a known number or a transpose of the last two axes
// of an operand, the product q k^T, the mask added to it, its softmax over the last axis. The
// product of those probabilities with v becomes Attention(q, k, v[, mask], scale), and the steps
// before it, which nothing else reads, drop out of the graph: the (B*H, Tq, Tk) scores are never
// stored, k is read as it lies (no copy of k^T), and q and k are not scaled by passes of their
// own. Where the pattern breaks off (a step with a second reader, a softmax over another axis,
// operands whose extents do not line up) the plain ops stay, as they were converted.
//
// Off unless WEFT_ONNX_FUSE_ATTENTION=1: on the CPU (2 threads, bench/onnx_bench) the imported
// encoder (128 positions, 4 heads of 64) at batch 32 took 45.9-46.7 ms folded against 36.9-40.1
// plain: at that length the scores of a head fit in cache, and oneDNN's batched products and
// softmax beat the Attention op's tiles. Turn it on where the sequences are long.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "weft/onnx/importer.h"

namespace weft::onnx_import {
namespace {

// Input i's step, when it is one and this node is its only reader.
const AttentionStep* StepOf(const NodeContext& n, int i, AttentionStep::Stage stage) {
  const Value* v = n.ValueOf(i);
  if (v == nullptr || !v->symbol || !v->attention || n.Uses(i) != 1) return nullptr;
  return v->attention->stage == stage ? &*v->attention : nullptr;
}

// Input i as an operand of the product q k^T: the value it scales or transposes, when it is such
// a step read only here, else itself.
AttentionStep OperandOf(NodeContext& n, int i) {
  if (const AttentionStep* s = StepOf(n, i, AttentionStep::kOperand)) return *s;
  AttentionStep plain;
  plain.x = n.Input(i);
  return plain;
}

// `converted` (the node's own conversion) with `step` recorded on it.
std::vector<Value> With(std::vector<Value> converted, const AttentionStep& step) {
  if (!converted.empty() && converted[0].symbol) converted[0].attention = step;
  return converted;
}

// Mul or Div of a computed value by one known number (`divides`: Div, the number second).
std::optional<AttentionStep> Scaling(NodeContext& n, bool divides) {
  for (int i : {0, 1}) {
    const HostTensor* c = n.Known(1 - i);
    const Value* v = n.ValueOf(i);
    if ((divides && i != 0) || c == nullptr || c->Size() != 1 || c->dims.size() > 1 ||
        v == nullptr || !v->symbol)  // a number of at most one axis: it adds none to x
      continue;
    const double number = c->Doubles()[0];
    if (!(number > 0) || !std::isfinite(number)) return std::nullopt;  // a positive scale only
    const double factor = divides ? 1 / number : number;
    if (const AttentionStep* scores = StepOf(n, i, AttentionStep::kScores)) {
      if (scores->mask) return std::nullopt;  // (s + mask) c is no s c + mask
      AttentionStep s = *scores;              // the product, scaled
      s.scale *= factor;
      return s;
    }
    AttentionStep s = OperandOf(n, i);
    s.scale *= factor;
    return s;
  }
  return std::nullopt;
}

// A Transpose of a computed value (3 or 4 axes) read only by the next step: its permutation,
// after any of the operand before it.
std::optional<AttentionStep> Permuted(NodeContext& n) {
  const Value* v = n.ValueOf(0);
  const std::vector<int64_t> perm = n.Ints("perm", {});
  if (v == nullptr || !v->symbol || perm.size() < 3 || perm.size() > 4) return std::nullopt;
  AttentionStep s;
  s.x = *v->symbol;
  s.x_perm = perm;
  return s;
}

// perm applied after `first` (empty: none): transpose(transpose(x, first), perm) as one.
std::vector<int64_t> Composed(const std::vector<int64_t>& first, const std::vector<int64_t>& perm) {
  if (first.empty()) return perm;
  std::vector<int64_t> out;
  for (int64_t a : perm) out.push_back(first[a]);
  return out;
}

// The last two axes swapped (rank r).
std::vector<int64_t> SwapLast(size_t r) {
  std::vector<int64_t> perm;
  for (size_t a = 0; a < r; ++a) perm.push_back(static_cast<int64_t>(a));
  std::swap(perm[r - 1], perm[r - 2]);
  return perm;
}

bool IsIdentity(const std::vector<int64_t>& perm) {
  for (size_t a = 0; a < perm.size(); ++a)
    if (perm[a] != static_cast<int64_t>(a)) return false;
  return true;
}

// MatMul(a, b) of two computed operands: the scores q k^T, k^T = b = transpose(k_src, k_perm)
// (FoldedAttention swaps its last two axes into k_perm, so k^T's own transpose costs nothing).
std::optional<AttentionStep> Scores(NodeContext& n) {
  if (n.Known(0) != nullptr || n.Known(1) != nullptr) return std::nullopt;
  const AttentionStep a = OperandOf(n, 0), b = OperandOf(n, 1);
  AttentionStep s;
  s.stage = AttentionStep::kScores;
  s.q_src = a.x;
  s.q_perm = a.x_perm;
  s.k_src = b.x;
  s.k_perm = b.x_perm;
  s.scale = a.scale * b.scale;
  return s;
}

// Add of a mask to the scores.
std::optional<AttentionStep> Masked(NodeContext& n) {
  for (int i : {0, 1}) {
    const AttentionStep* scores = StepOf(n, i, AttentionStep::kScores);
    if (scores == nullptr || scores->mask || !n.HasInput(1 - i)) continue;
    AttentionStep s = *scores;
    s.mask = n.Input(1 - i);
    return s;
  }
  return std::nullopt;
}

// Where(condition, -inf, scores) (a masked_fill, as PyTorch exports a causal mask): the additive
// mask where(condition, -inf, 0), of the condition's extents, not the scores'.
std::optional<AttentionStep> Filled(NodeContext& n) {
  const AttentionStep* scores = StepOf(n, 2, AttentionStep::kScores);
  const HostTensor* fill = n.Known(1);
  if (scores == nullptr || scores->mask || fill == nullptr || fill->Size() != 1 ||
      fill->Doubles()[0] != -std::numeric_limits<double>::infinity() || !n.HasInput(0))
    return std::nullopt;
  AttentionStep s = *scores;
  const Symbol c = n.Op("Cast", {n.Input(0)}, {{"dtype", "float32"}});
  s.mask = n.Op("where", {c, n.Input(1), n.Op("zeros_like", {c})});
  return s;
}

// Extents of a computed value, or nullopt where the import cannot follow them.
std::optional<std::vector<SymDim>> ExtentsOf(const NodeContext& n, const Symbol& x) {
  try {
    return n.ShapeOf(x, "an attention operand");
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<SymDim> Permute(const std::vector<SymDim>& dims, const std::vector<int64_t>& perm) {
  if (perm.empty()) return dims;
  std::vector<SymDim> out;
  for (int64_t a : perm) out.push_back(dims[a]);
  return out;
}

// x, transposed by `perm` where it is not empty.
Symbol Transposed(NodeContext& n, const Symbol& x, const std::vector<int64_t>& perm) {
  return perm.empty() ? x : n.Op("transpose", {x}, {{"axes", Tuple(perm)}});
}

// Attention(q, k, v[, mask]) for softmax(q k^T scale + mask) v, the product node being `n` and v
// its input 1; nullopt where the operands' extents do not line up as Attention reads them.
std::optional<Value> FoldedAttention(NodeContext& n, const AttentionStep& p) {
  const Symbol v = n.Input(1);
  const auto q_src = ExtentsOf(n, p.q_src), k_src = ExtentsOf(n, p.k_src);
  const auto v_dims = ExtentsOf(n, v);
  if (!q_src || !k_src || !v_dims) return std::nullopt;
  const size_t r = q_src->size();
  if (r < 3 || r > 4 || k_src->size() != r || v_dims->size() != r) return std::nullopt;
  for (const std::vector<int64_t>* perm : {&p.q_perm, &p.k_perm})
    if (!perm->empty() && perm->size() != r) return std::nullopt;
  std::vector<int64_t> k_perm = Composed(p.k_perm, SwapLast(r)), q_perm = p.q_perm;
  if (IsIdentity(k_perm)) k_perm.clear();
  if (IsIdentity(q_perm)) q_perm.clear();
  const std::vector<SymDim> q = Permute(*q_src, q_perm), k = Permute(*k_src, k_perm);
  for (size_t a = 0; a + 2 < r; ++a) {  // B and H (or B*H) alike, no broadcast
    if (!(q[a] == k[a]) || !(q[a] == (*v_dims)[a])) return std::nullopt;
  }
  if (!(q[r - 1] == k[r - 1]) || !(k[r - 2] == (*v_dims)[r - 2])) return std::nullopt;
  if (p.mask) {  // it broadcasts to the scores (..., Tq, Tk) as they are, adding no axis
    std::vector<SymDim> scores(q.begin(), q.end() - 1);
    scores.push_back(k[r - 2]);
    const auto m = ExtentsOf(n, *p.mask);
    if (!m || m->size() > r) return std::nullopt;
    for (size_t j = 0; j < m->size(); ++j) {
      const SymDim& e = (*m)[m->size() - 1 - j];
      if (!(e == SymDim::Of(1)) && !(e == scores[r - 1 - j])) return std::nullopt;
    }
  }
  std::vector<Symbol> in = {Transposed(n, p.q_src, q_perm), Transposed(n, p.k_src, k_perm), v};
  if (r == 3) {  // (B*H, T, D): one batch of B*H heads
    for (Symbol& x : in) x = n.Op("expand_dims", {x}, {{"axis", "0"}});
  }
  if (p.mask) in.push_back(*p.mask);
  const Symbol out = n.Op("Attention", in,
                          {{"scale", Number(p.scale)},
                           {"use_mask", p.mask ? "true" : "false"},
                           {"causal", "false"}})[0];
  if (r == 4) return Value::Of(out);
  return Value::Of(n.Op("reshape_dims", {out}, {{"shape", "(in0[1], in0[2], in0[3])"}}));
}

// Softmax of the scores over their last axis.
std::optional<AttentionStep> Normalized(NodeContext& n) {
  const AttentionStep* scores = StepOf(n, 0, AttentionStep::kScores);
  if (scores == nullptr || n.Int("axis", n.opset() >= 13 ? -1 : 1) != -1) return std::nullopt;
  AttentionStep s = *scores;
  s.stage = AttentionStep::kProbabilities;
  return s;
}

bool FoldOn() { return GetEnvBool("WEFT_ONNX_FUSE_ATTENTION", false); }

// `convert`, recording the step `step` finds on its value while the fold is on (no step is looked
// for, and no op made for one, while it is off).
Converter Recording(Converter convert, std::optional<AttentionStep> (*step)(NodeContext&)) {
  return [convert, step](NodeContext& n) {
    const std::optional<AttentionStep> s = FoldOn() ? step(n) : std::nullopt;
    return s ? With(convert(n), *s) : convert(n);
  };
}

}  // namespace

void AddAttentionConverters(ConverterTable& t) {
  t["Mul"] = Recording(t.at("Mul"), [](NodeContext& n) { return Scaling(n, /*divides=*/false); });
  t["Div"] = Recording(t.at("Div"), [](NodeContext& n) { return Scaling(n, /*divides=*/true); });
  t["Transpose"] = Recording(t.at("Transpose"), Permuted);
  t["Add"] = Recording(t.at("Add"), Masked);
  t["Where"] = Recording(t.at("Where"), Filled);
  t["Softmax"] = Recording(t.at("Softmax"), Normalized);
  const Converter matmul = t.at("MatMul");
  t["MatMul"] = [matmul](NodeContext& n) {
    if (!FoldOn()) return matmul(n);
    if (const AttentionStep* p = StepOf(n, 0, AttentionStep::kProbabilities)) {
      if (n.Known(1) == nullptr) {
        if (std::optional<Value> folded = FoldedAttention(n, *p))
          return std::vector<Value>{*folded};
      }
    }
    std::vector<Value> converted = matmul(n);
    if (converted[0].dense) return converted;
    const std::optional<AttentionStep> s = Scores(n);
    return s ? With(std::move(converted), *s) : converted;
  };
}

}  // namespace weft::onnx_import
