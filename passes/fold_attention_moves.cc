#include "passes/fold_attention_moves.h"

#include <algorithm>
#include <array>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/attention.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"
#include "passes/internal/moves.h"

namespace weft {
namespace {

constexpr uint32_t kNone = ~0u;

// Where one part's (B, H, T, D) rows lie: in `root` from `offset`, the heads (B and H merged) as
// runs, then T's run (none for one position); D is contiguous. `copy`: the strided copy the
// part's rows come from or go to, which the fold leaves out (kNone: the part is its own root).
struct Part {
  NodeEntry root;
  int64_t offset = 0;
  Runs heads;
  Runs t;
  uint32_t copy = kNone;
};

// The view's axes of `s` (B, H, T, D) as a part, or nullopt where D is not contiguous or T is
// more than one run.
std::optional<Part> PartOf(NodeEntry root, int64_t offset, const Runs& walk, const Shape& s,
                           uint32_t copy) {
  const std::optional<std::vector<Runs>> axes = Regrouped(Normalized(walk), s);
  if (!axes) return std::nullopt;
  const Runs& d = (*axes)[3];
  if (d.size() > 1 || (d.size() == 1 && d[0].stride != 1) || (*axes)[2].size() > 1)
    return std::nullopt;
  Runs heads = (*axes)[0];
  heads.insert(heads.end(), (*axes)[1].begin(), (*axes)[1].end());
  return Part{root, offset, Normalized(heads), (*axes)[2], copy};
}

// Entry e of shape s (B, H, T, D) as it lies, a part of its own.
Part Whole(NodeEntry e, const Shape& s) { return *PartOf(e, 0, {{s.Size(), 1}}, s, kNone); }

// The walk of a strided copy's output in its input.
Runs WalkOf(const StridedCopyParam& p) {
  Runs walk;
  for (size_t k = 0; k < p.walk.size(); ++k) walk.push_back({p.walk[k], p.stride[k]});
  return walk;
}

// Where each element of a tensor of `size` elements lands in the output of a copy that reads it
// by `walk` from offset 0: the walk's runs in the order of the tensor's elements, each with its
// stride in the output; nullopt unless the copy reads every element once.
std::optional<Runs> Inverse(const Runs& walk, int64_t offset, int64_t size) {
  struct Step {
    int64_t extent, in, out;
  };
  std::vector<Step> steps;
  int64_t out = 1;
  const Runs runs = Normalized(walk);
  for (auto r = runs.rbegin(); r != runs.rend(); ++r) {
    steps.push_back({r->extent, r->stride, out});
    out *= r->extent;
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.in > b.in; });
  int64_t step = 1;
  Runs inverse;
  for (auto s = steps.rbegin(); s != steps.rend(); ++s) {
    if (s->in != step) return std::nullopt;
    step *= s->extent;
  }
  if (offset != 0 || step != size) return std::nullopt;
  for (const Step& s : steps) inverse.push_back({s.extent, s.out});
  return inverse;
}

// The cut of B * H positions that every part's heads take whole: (B, H), or nullopt where the
// parts cut them three ways or more, or crosswise.
std::optional<std::array<int64_t, 2>> CommonHeads(const std::vector<const Runs*>& parts,
                                                  int64_t heads) {
  std::set<int64_t> bounds = {heads};  // each part's products of its inner runs
  for (const Runs* runs : parts) {
    int64_t inner = 1;
    for (auto r = runs->rbegin(); r != runs->rend(); ++r) bounds.insert(inner *= r->extent);
  }
  bounds.erase(1);
  if (bounds.empty()) return std::array<int64_t, 2>{1, 1};
  if (bounds.size() > 2) return std::nullopt;
  const int64_t h = *bounds.begin();
  if (heads % h != 0) return std::nullopt;
  return std::array<int64_t, 2>{heads / h, h};
}

class Folder {
 public:
  explicit Folder(const Graph& g) : g_(g), readers_(g.nodes().size()), gone_(g.nodes().size()) {
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      for (const NodeEntry& in : g.node(n).inputs) readers_[in.node].push_back(n);
    }
    for (const NodeEntry& e : g.outputs()) readers_[e.node].push_back(kNone);
    for (uint32_t n = 0; n < g.nodes().size(); ++n) Consider(n);
  }

  Graph Rewrite(int* folded) const {
    if (folded != nullptr) *folded = copies_;
    if (copies_ == 0) return g_;
    const Graph untyped = g_.ToBuilder().Freeze();
    GraphRewrite r(untyped);
    std::vector<const Fold*> at(g_.nodes().size(), nullptr);  // by Attention node
    for (const Fold& f : folds_) at[f.attention] = &f;
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (gone_[n]) continue;
      if (at[n] != nullptr) {
        Write(*at[n], r);
      } else {
        r.Keep(n);
      }
    }
    return std::move(r).Finish();
  }

 private:
  struct Fold {
    uint32_t attention;
    std::array<Part, 4> parts;  // q, k, v, out
    std::array<int64_t, 2> heads;
    std::vector<int64_t> mask_shape;  // the mask reshaped to the heads' cut; empty: as it is
  };

  const Shape& ShapeOf(NodeEntry e) const { return g_.shapes()[g_.EntryId(e)]; }

  bool ReadOnlyBy(uint32_t n, uint32_t reader) const {
    return std::all_of(readers_[n].begin(), readers_[n].end(),
                       [&](uint32_t m) { return m == reader; });
  }

  bool IsStridedCopy(uint32_t n) const {
    const Node& node = g_.node(n);
    return node.op != nullptr && node.op->name == "_strided_copy";
  }

  // Operand entry e of Attention node a: through its copy where a alone reads it and no fold
  // before took it (an earlier Attention's result that writes the copy's rows itself).
  Part OperandPart(NodeEntry e, uint32_t a) const {
    if (IsStridedCopy(e.node) && ReadOnlyBy(e.node, a) && !gone_[e.node]) {
      const Node& copy = g_.node(e.node);
      const StridedCopyParam& p = copy.attrs.Get<StridedCopyParam>();
      if (std::optional<Part> part =
              PartOf(copy.inputs[0], p.offset, WalkOf(p), ShapeOf(e), e.node))
        return *part;
    }
    return Whole(e, ShapeOf(e));
  }

  // Whether a node reads an output of node a other than its first (the log-sum-exp, whose shape
  // follows the heads' cut).
  bool ReadsPastOut(uint32_t a) const {
    for (uint32_t m : readers_[a]) {
      if (m == kNone) continue;
      for (const NodeEntry& in : g_.node(m).inputs) {
        if (in.node == a && in.index != 0) return true;
      }
    }
    for (const NodeEntry& e : g_.outputs()) {
      if (e.node == a && e.index != 0) return true;
    }
    return false;
  }

  // Attention node a's out: where the one strided copy that reads it puts its rows.
  Part OutPart(uint32_t a) const {
    const NodeEntry out{a, 0};
    const Shape& s = ShapeOf(out);
    const std::vector<uint32_t>& readers = readers_[a];
    if (readers.size() == 1 && readers[0] != kNone && IsStridedCopy(readers[0]) &&
        g_.node(readers[0]).inputs[0] == out) {
      const StridedCopyParam& p = g_.node(readers[0]).attrs.Get<StridedCopyParam>();
      if (std::optional<Runs> inverse = Inverse(WalkOf(p), p.offset, s.Size())) {
        if (std::optional<Part> part = PartOf({readers[0], 0}, 0, *inverse, s, readers[0]))
          return *part;
      }
    }
    return Whole(out, s);
  }

  void Consider(uint32_t a) {
    const Node& node = g_.node(a);
    if (node.op == nullptr || node.op->name != "Attention") return;
    const AttentionParam& p = node.attrs.Get<AttentionParam>();
    if (p.layout != AttentionLayout::kBhtd || ReadsPastOut(a)) return;
    Fold f{a, {}, {}, {}};
    for (int i = 0; i < 3; ++i) f.parts[i] = OperandPart(node.inputs[i], a);
    f.parts[3] = OutPart(a);
    const Shape& q = ShapeOf(node.inputs[0]);
    std::vector<const Runs*> heads;
    for (const Part& part : f.parts) heads.push_back(&part.heads);
    const std::optional<std::array<int64_t, 2>> cut = CommonHeads(heads, q[0] * q[1]);
    if (!cut || !MaskFits(node, p, *cut, f)) return;
    f.heads = *cut;
    std::set<uint32_t> copies;
    for (Part& part : f.parts) {
      std::optional<std::vector<Runs>> axes = Regrouped(part.heads, Shape{(*cut)[0], (*cut)[1]});
      if (!axes || (*axes)[0].size() > 1 || (*axes)[1].size() > 1) return;
      part.heads = {(*axes)[0].empty() ? Run{1, 0} : (*axes)[0][0],
                    (*axes)[1].empty() ? Run{1, 0} : (*axes)[1][0]};
      if (part.copy != kNone) copies.insert(part.copy);
    }
    if (copies.empty()) return;
    for (uint32_t c : copies) gone_[c] = true;
    copies_ += static_cast<int>(copies.size());
    folds_.push_back(std::move(f));
  }

  // Whether the mask, if any, broadcasts to the heads cut as `cut`: as it is (its heads
  // broadcast, or cut so already), or reshaped (over all B * H heads).
  bool MaskFits(const Node& a, const AttentionParam& p, std::array<int64_t, 2> cut, Fold& f) const {
    if (!p.use_mask) return true;
    const Shape& q = ShapeOf(a.inputs[0]);
    const Shape& m = ShapeOf(a.inputs[AttentionSlotsOf(p).mask]);
    if (cut[0] == q[0] && cut[1] == q[1]) return true;
    const int n = m.ndim();
    const int64_t mb = n >= 4 ? m[n - 4] : 1, mh = n >= 3 ? m[n - 3] : 1;
    if (mb * mh == 1) return true;
    if (mb * mh != q[0] * q[1]) return false;
    f.mask_shape = {cut[0], cut[1], n >= 2 ? m[n - 2] : 1, m[n - 1]};
    return true;
  }

  // The folded Attention in place of node f.attention, reading the parts' roots.
  void Write(const Fold& f, GraphRewrite& r) const {
    const Node& a = g_.node(f.attention);
    const AttentionParam& p = a.attrs.Get<AttentionParam>();
    std::vector<NodeEntry> in;
    for (int i = 0; i < 3; ++i) in.push_back(r.Map(f.parts[i].root));
    if (p.use_mask) {
      NodeEntry mask = r.Map(a.inputs[AttentionSlotsOf(p).mask]);
      if (!f.mask_shape.empty()) {
        Node reshape;
        reshape.name = a.name + "_mask";
        reshape.op = &GetOp("reshape");
        reshape.attrs = ParseAttrs(*reshape.op, {{"shape", Shape(f.mask_shape).ToString()}});
        reshape.inputs = {mask};
        mask = {r.Add(std::move(reshape), {}), 0};
      }
      in.push_back(mask);
    }
    const Shape& q = ShapeOf(a.inputs[0]);
    const Shape& k = ShapeOf(a.inputs[1]);
    const Shape& v = ShapeOf(a.inputs[2]);
    const Part& out = f.parts[3];
    const Shape& out_shape = out.copy != kNone ? ShapeOf({out.copy, 0}) : ShapeOf({f.attention, 0});
    std::vector<int64_t> rows;
    for (const Part& part : f.parts) {
      rows.insert(rows.end(), {part.offset, part.heads[0].stride, part.heads[1].stride,
                               part.t.empty() ? 0 : part.t[0].stride});
    }
    Node folded =
        WithAttrs(a, {{"layout", "rows"},
                      {"dims", Shape{f.heads[0], f.heads[1], q[2], k[2], q[3], v[3]}.ToString()},
                      {"rows", FormatTuple(rows)},
                      {"out_shape", out_shape.ToString()}});
    folded.inputs = std::move(in);
    const uint32_t now = r.Add(std::move(folded), {});
    r.MapNode(f.attention, now);
    for (uint32_t o = 0; o < a.num_outputs(); ++o) r.MapEntry({f.attention, o}, {now, o});
    if (out.copy != kNone) {
      r.MapNode(out.copy, now);
      r.MapEntry({out.copy, 0}, {now, 0});
    }
  }

  const Graph& g_;
  std::vector<std::vector<uint32_t>> readers_;  // per node: the nodes reading it (kNone: outputs)
  std::vector<bool> gone_;                      // per node: a copy a fold leaves out
  std::vector<Fold> folds_;
  int copies_ = 0;
};

}  // namespace

Graph FoldAttentionMoves(const Graph& typed, int* folded) {
  WEFT_CHECK(typed.has_types()) << "FoldAttentionMoves reads the shapes of a typed graph";
  return Folder(typed).Rewrite(folded);
}

}  // namespace weft
