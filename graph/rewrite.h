// Building a graph from an old one: what a pass that drops, reorders, copies or replaces nodes
// writes once. A GraphRewrite appends the new graph's nodes and remembers where each old node and
// entry went; Finish renumbers what the old graph named by node (its outputs, head gradients and
// the forward node of every backward node) and carries the shapes and dtypes over when the old
// graph has them. Renumber is the common case: the old nodes, some of them, in a new order.
//
//   Graph live = Renumber(g, {0, 1, 3});   // node 3 becomes node 2; inputs and outputs follow
//
//   GraphRewrite r(g);
//   for (uint32_t n : order) r.Keep(n);                 // a copy, its inputs renumbered
//   uint32_t f = r.Add(fused, {e0, e1});                // a new node typed like old entries e0, e1
//   r.MapNode(member, f);  r.MapEntry({member, 0}, {f, 1});
//   Graph out = std::move(r).Finish();
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace weft {

class GraphRewrite {
 public:
  explicit GraphRewrite(const Graph& from);

  // The new entry that old entry `e` became; throws weft::Error when none was mapped to it.
  NodeEntry Map(NodeEntry e) const;
  // Appends old node n with its inputs mapped, and maps n and its outputs to it. Returns its index.
  uint32_t Keep(uint32_t n);
  // As Keep, reading `inputs` (entries of the new graph) instead.
  uint32_t Keep(uint32_t n, std::vector<NodeEntry> inputs);
  // Appends `node`, whose inputs are entries of the new graph and whose forward_node is a node of
  // the old one (or -1), with the types of old entries `typed_like` (one per output; none when the
  // old graph is untyped). Maps nothing to it. Returns its index.
  uint32_t Add(Node node, const std::vector<uint32_t>& typed_like);
  // As Add, typed like old node `like`'s outputs.
  uint32_t AddLike(Node node, uint32_t like);
  // Old node n is new node `now` for the nodes that name it (forward nodes, head gradients).
  void MapNode(uint32_t n, uint32_t now);
  // Old entry `e` is new entry `now` for its readers (Map) and the outputs.
  void MapEntry(NodeEntry e, NodeEntry now);
  uint32_t num_nodes() const { return static_cast<uint32_t>(b_.nodes.size()); }

  // The new graph: the old outputs, head gradients and forward nodes mapped, as many forward
  // outputs, typed when the old graph is. Throws weft::Error when one names an old node or entry
  // nothing was mapped to.
  Graph Finish() &&;

 private:
  uint32_t NewNode(uint32_t n, const char* what) const;

  const Graph& from_;
  GraphBuilder b_;
  std::vector<uint32_t> node_;    // per old node: its new node, or kNone
  std::vector<NodeEntry> entry_;  // per old entry: its new entry ({kNone, 0}: none)
  std::vector<Shape> shapes_;     // per new entry, when from_ is typed
  std::vector<DType> dtypes_;
};

// Node `n` with the attributes `set` over its own (parsed again: a bad value is a weft::Error that
// names the op), its inputs as they were: what a pass that changes an op's attributes appends.
Node WithAttrs(Node n, const AttrMap& set);

// The nodes of `g` at `order` (each at most once, every node's inputs before it), node order[i]
// becoming node i; inputs, outputs, head gradients, forward nodes and types follow.
// Throws weft::Error when a kept node reads, or an output names, a node not kept.
Graph Renumber(const Graph& g, const std::vector<uint32_t>& order);

}  // namespace weft
