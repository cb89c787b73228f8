#include "passes/rematerialize.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "passes/fusable.h"

namespace weft {

namespace {

class Remat {
 public:
  explicit Remat(const Graph& g)
      : g_(g),
        size_(g.nodes().size()),
        worth_(g.nodes().size(), kUnknown),
        copy_(g.nodes().size(), -1),
        stamp_(g.nodes().size(), 0),
        rewrite_(g) {
    for (uint32_t n = 0; n < size_.size(); ++n) size_[n] = FusableSize(g, n);
  }

  Graph Run(size_t* copies) {
    size_t made = 0;
    if (copies != nullptr) *copies = 0;
    if (!Needed()) return g_;
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) Emit(n, made);
    if (copies != nullptr) *copies = made;
    return std::move(rewrite_).Finish();
  }

 private:
  enum Worth : int8_t { kUnknown, kNo, kYes };

  bool Forward(uint32_t n) const { return size_[n] >= 0 && !g_.node(n).is_backward(); }

  // Whether input i of backward node n is a forward value worth recomputing for it.
  bool Recomputes(uint32_t n, size_t i) {
    const Node& node = g_.node(n);
    if (size_[n] < 0 || !node.is_backward() || !IsDataInput(node.op->pointwise.kind, i))
      return false;
    const uint32_t f = node.inputs[i].node;
    return Forward(f) && size_[f] == size_[n] && WorthIt(f);
  }

  bool Needed() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      for (size_t i = 0; i < g_.node(n).inputs.size(); ++i) {
        if (Recomputes(n, i)) return true;
      }
    }
    return false;
  }

  // f and the forward nodes of its size it reads as data, transitively, in node order; empty when
  // they are more than kRematCap. Marks them with a fresh token_.
  std::vector<uint32_t> Cone(uint32_t f) {
    std::vector<uint32_t> cone, stack{f};
    stamp_[f] = ++token_;
    while (!stack.empty()) {
      const uint32_t n = stack.back();
      stack.pop_back();
      cone.push_back(n);
      if (cone.size() > kRematCap) return {};
      const Node& node = g_.node(n);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const uint32_t p = node.inputs[i].node;
        if (!IsDataInput(node.op->pointwise.kind, i) || !Forward(p) || size_[p] != size_[f] ||
            stamp_[p] == token_) {
          continue;
        }
        stamp_[p] = token_;
        stack.push_back(p);
      }
    }
    std::sort(cone.begin(), cone.end());
    return cone;
  }

  // Whether f's cone fits and reads at most kRematFullInputs full-size entries from outside.
  bool WorthIt(uint32_t f) {
    if (worth_[f] != kUnknown) return worth_[f] == kYes;
    const std::vector<uint32_t> cone = Cone(f);
    std::vector<NodeEntry> outside;
    for (uint32_t n : cone) {
      const Node& node = g_.node(n);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const NodeEntry& in = node.inputs[i];
        if (!IsDataInput(node.op->pointwise.kind, i) || stamp_[in.node] == token_) continue;
        if (g_.shapes()[g_.EntryId(in)].Size() != size_[f]) continue;  // broadcast: small
        if (std::find(outside.begin(), outside.end(), in) == outside.end()) outside.push_back(in);
      }
    }
    worth_[f] = !cone.empty() && outside.size() <= kRematFullInputs ? kYes : kNo;
    return worth_[f] == kYes;
  }

  // Copies of f's cone not copied yet, in node order, in the backward phase.
  void EmitCopies(uint32_t f, size_t& made) {
    for (uint32_t m : Cone(f)) {
      if (copy_[m] >= 0) continue;
      Node node = g_.node(m);
      node.name += "_recomputed";
      node.forward_node = m;  // the original, in the backward phase
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        const NodeEntry in = node.inputs[i];
        const bool copied = IsDataInput(node.op->pointwise.kind, i) && copy_[in.node] >= 0;
        node.inputs[i] =
            copied ? NodeEntry{static_cast<uint32_t>(copy_[in.node]), in.index} : rewrite_.Map(in);
      }
      copy_[m] = rewrite_.AddLike(std::move(node), m);
      ++made;
    }
  }

  // Node n, reading the copies its recomputed inputs have in the backward phase.
  void Emit(uint32_t n, size_t& made) {
    std::vector<NodeEntry> inputs = g_.node(n).inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const NodeEntry in = inputs[i];
      if (Recomputes(n, i)) {
        EmitCopies(in.node, made);
        inputs[i] = {static_cast<uint32_t>(copy_[in.node]), in.index};
      } else {
        inputs[i] = rewrite_.Map(in);
      }
    }
    rewrite_.Keep(n, std::move(inputs));
  }

  const Graph& g_;
  std::vector<int64_t> size_;    // FusableSize per node
  std::vector<Worth> worth_;     // per forward node: whether to recompute it
  std::vector<int64_t> copy_;    // per node: its copy in the new graph, or -1
  std::vector<uint64_t> stamp_;  // per node: token_ when in the cone being walked
  uint64_t token_ = 0;
  GraphRewrite rewrite_;
};

}  // namespace

Graph Rematerialize(const Graph& typed, size_t* copies) {
  WEFT_CHECK(typed.has_types()) << "rematerialization: run shape and type inference first";
  return Remat(typed).Run(copies);
}

}  // namespace weft
