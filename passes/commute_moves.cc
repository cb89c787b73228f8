#include "passes/commute_moves.h"

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"
#include "passes/internal/moves.h"

namespace weft {
namespace {

// A move of one layer's rows across it: the nodes it replaces and what the rewrite adds.
struct Commute {
  uint32_t layer;
  std::vector<uint32_t> moves;  // up: the one transpose; down: the chain after the layer, in order
  bool up;
};

class Commuter {
 public:
  explicit Commuter(const Graph& g)
      : g_(g), readers_(g.nodes().size()), claimed_(g.nodes().size()) {
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      const Node& node = g.node(n);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const NodeEntry in = node.inputs[i];
        readers_[in.node].push_back(in.index == 0 && i == 0 ? n : kOther);
      }
    }
    for (const NodeEntry& e : g.outputs()) readers_[e.node].push_back(kOther);
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      if (!MapsRows(n)) continue;
      if (std::optional<Commute> c = Up(n); c && Claim(*c))
        found_.push_back(*c);
      else if (c = Down(n); c && Claim(*c))
        found_.push_back(*c);
    }
  }

  Graph Rewrite(int* moved) const {
    if (moved != nullptr) *moved = static_cast<int>(found_.size());
    if (found_.empty()) return g_;
    const Graph untyped = g_.ToBuilder().Freeze();
    GraphRewrite r(untyped);
    std::vector<const Commute*> at(g_.nodes().size(), nullptr);  // by layer
    for (const Commute& c : found_) at[c.layer] = &c;
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (at[n] != nullptr) {
        at[n]->up ? MoveUp(*at[n], r) : MoveDown(*at[n], r);
      } else if (!claimed_[n]) {
        r.Keep(n);
      }
    }
    return std::move(r).Finish();
  }

 private:
  static constexpr uint32_t kOther = ~0u;

  const Shape& ShapeOf(NodeEntry e) const { return g_.shapes()[g_.EntryId(e)]; }
  const Shape& OutShape(uint32_t n) const { return ShapeOf({n, 0}); }

  // Node n is a FullyConnected over the last axis of its data.
  bool MapsRows(uint32_t n) const {
    const Node& node = g_.node(n);
    if (node.op == nullptr || node.op->name != "FullyConnected") return false;
    return !node.attrs.Get<FcParam>().flatten || ShapeOf(node.inputs[0]).ndim() == 2;
  }

  // The one node that reads node n's output 0 (as its input 0), or kOther.
  uint32_t OnlyReader(uint32_t n) const {
    return readers_[n].size() == 1 ? readers_[n][0] : kOther;
  }

  // Move node m keeps rows whole: a transpose that leaves the last axis last, or a reshape that
  // leaves its extent as it is.
  bool KeepsRows(uint32_t m) const {
    const Node& node = g_.node(m);
    const Shape& in = ShapeOf(node.inputs[0]);
    const Shape& out = OutShape(m);
    if (in.ndim() == 0 || out.ndim() == 0 || in.Size() == 0) return false;
    if (node.op->name == "transpose") {
      return TransposePermutation(node.attrs.Get<TransposeParam>(), in.ndim()).back() ==
             in.ndim() - 1;
    }
    return IsReshape(node) && in[in.ndim() - 1] == out[out.ndim() - 1];
  }

  bool IsTranspose(uint32_t n) const {
    const Node& node = g_.node(n);
    return node.op != nullptr && node.op->name == "transpose";
  }

  // Layer n's input is a transpose only it reads, and movement ops read all of its output.
  std::optional<Commute> Up(uint32_t n) const {
    const uint32_t t = g_.node(n).inputs[0].node;
    if (g_.node(n).inputs[0].index != 0 || !IsTranspose(t) || OnlyReader(t) != n || !KeepsRows(t) ||
        readers_[n].empty())
      return std::nullopt;
    for (uint32_t m : readers_[n]) {
      if (m == kOther || !IsMove(g_.node(m))) return std::nullopt;
    }
    return Commute{n, {t}, true};
  }

  // Layer n's input comes from a movement op; the chain of moves after it that keep rows, up to
  // its last transpose.
  std::optional<Commute> Down(uint32_t n) const {
    if (!IsMove(g_.node(g_.node(n).inputs[0].node))) return std::nullopt;
    std::vector<uint32_t> chain;
    size_t through_transpose = 0;
    for (uint32_t m = OnlyReader(n); m != kOther && IsMove(g_.node(m)) && KeepsRows(m);
         m = OnlyReader(m)) {
      chain.push_back(m);
      if (IsTranspose(m)) through_transpose = chain.size();
    }
    if (through_transpose == 0) return std::nullopt;
    chain.resize(through_transpose);
    return Commute{n, chain, false};
  }

  bool Claim(const Commute& c) {
    if (claimed_[c.layer]) return false;
    for (uint32_t m : c.moves) {
      if (claimed_[m]) return false;
    }
    claimed_[c.layer] = true;
    for (uint32_t m : c.moves) claimed_[m] = true;
    return true;
  }

  // The layer on the transpose's input, then the transpose, which stands for the layer's output.
  void MoveUp(const Commute& c, GraphRewrite& r) const {
    const Node& t = g_.node(c.moves[0]);
    std::vector<NodeEntry> in = g_.node(c.layer).inputs;
    in[0] = t.inputs[0];
    const uint32_t layer = r.Keep(c.layer, Mapped(std::move(in), r));
    Node moved = t;
    moved.inputs = {{layer, 0}};
    const uint32_t now = r.Add(std::move(moved), {});
    r.MapNode(c.moves[0], now);
    r.MapEntry({c.layer, 0}, {now, 0});
  }

  // The chain on the layer's input, each reshape to its shape with the input's row length, then
  // the layer (over the last axis), which stands for the chain's last output.
  void MoveDown(const Commute& c, GraphRewrite& r) const {
    const Node& layer = g_.node(c.layer);
    const Shape& data = ShapeOf(layer.inputs[0]);
    const int64_t row = data[data.ndim() - 1];
    NodeEntry x = r.Map(layer.inputs[0]);
    for (uint32_t m : c.moves) {
      Node moved = g_.node(m);
      if (!IsTranspose(m)) {
        std::vector<int64_t> shape(OutShape(m).dims().begin(), OutShape(m).dims().end());
        shape.back() = row;
        moved.op = &GetOp("reshape");
        moved.attrs = ParseAttrs(*moved.op, {{"shape", Shape(shape).ToString()}});
      }
      moved.inputs = {x};
      const uint32_t now = r.Add(std::move(moved), {});
      r.MapNode(m, now);
      x = {now, 0};
    }
    Node over = WithAttrs(layer, {{"flatten", "false"}});
    over.inputs = Mapped(layer.inputs, r);
    over.inputs[0] = x;
    const uint32_t now = r.Add(std::move(over), {});
    r.MapNode(c.layer, now);
    r.MapEntry({c.moves.back(), 0}, {now, 0});
  }

  static std::vector<NodeEntry> Mapped(std::vector<NodeEntry> in, const GraphRewrite& r) {
    for (NodeEntry& e : in) e = r.Map(e);
    return in;
  }

  const Graph& g_;
  std::vector<std::vector<uint32_t>> readers_;  // per node: readers of output 0 (kOther: others)
  std::vector<bool> claimed_;  // per node: a layer or a move of a Commute in found_
  std::vector<Commute> found_;
};

}  // namespace

Graph CommuteMoves(const Graph& typed, int* moved) {
  WEFT_CHECK(typed.has_types()) << "CommuteMoves reads the shapes of a typed graph";
  return Commuter(typed).Rewrite(moved);
}

}  // namespace weft
