// The graph IR: a topologically ordered list of nodes (an op with attributes and input entries,
// or a variable), the graph's outputs, and the typed attributes passes attach (shapes, dtypes,
// the memory plan). A Graph is a frozen value: its parts are immutable and shared, so copies are
// cheap. Passes build graphs with a GraphBuilder, a plain mutable description whose Freeze()
// checks it and numbers the entries once, and attach typed attributes with With...(), which
// returns a new Graph. Built from a Symbol (symbol.h) and rewritten by passes (passes/), each a
// function from Graph to Graph.
//
//   GraphBuilder b = symbol.ToGraph().ToBuilder();   // or a GraphBuilder from scratch
//   b.nodes.push_back(...);
//   Graph g = std::move(b).Freeze();
//   for (const Node& node : g.nodes()) ... node.inputs ...
//   uint32_t e = g.EntryId({node, 0});   // dense id of an output, for per-entry attributes
//   Graph typed = g.WithTypes(shapes, dtypes);   // typed.shapes()[e]
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/op.h"

namespace weft {

// Output `index` of node `node`.
struct NodeEntry {
  uint32_t node = 0;
  uint32_t index = 0;
  friend bool operator==(const NodeEntry& a, const NodeEntry& b) {
    return a.node == b.node && a.index == b.index;
  }
  friend bool operator<(const NodeEntry& a, const NodeEntry& b) {
    return a.node != b.node ? a.node < b.node : a.index < b.index;
  }
};

struct Node {
  const Op* op = nullptr;  // null: a variable (an argument of the graph)
  std::string name;
  Attrs attrs;  // parsed for `op`; raw() is what the user wrote
  std::vector<NodeEntry> inputs;
  // For backward nodes: the forward node they differentiate (for the nodes an executor's
  // GraphExtension appends after the gradients, such as optimizer updates: the one they serve);
  // -1 for forward nodes.
  int64_t forward_node = -1;
  bool is_backward() const { return forward_node >= 0; }

  bool is_variable() const { return op == nullptr; }
  uint32_t num_outputs() const {
    return op == nullptr ? 1 : static_cast<uint32_t>(NumOutputs(*op, attrs));
  }
};

// How each entry is stored: a storage id shared by entries whose lifetimes do not overlap, or
// kExternal for entries bound to user arrays (arguments, gradients, outputs, and an output that
// is an argument its op updates: Op::UpdatedInput, inplace set).
struct MemoryPlan {
  static constexpr int kExternal = -1;
  std::vector<int> storage_id;        // per entry
  std::vector<size_t> storage_bytes;  // per storage id
  std::vector<bool> inplace;  // per entry: shares its input's storage (the op runs in place)
  size_t total_bytes = 0;     // what the plan allocates
  size_t naive_bytes = 0;     // one buffer per internal entry, for comparison
};

class Graph;

// A graph being built or rewritten: plain fields, checked only by Freeze.
struct GraphBuilder {
  std::vector<Node> nodes;  // inputs before users
  std::vector<NodeEntry> outputs;
  // Outputs [0, num_forward_outputs) are the forward outputs; the gradient pass appends the
  // gradients it was asked for; head_grads[i] is the variable node holding the gradient that
  // flows into forward output i.
  size_t num_forward_outputs = 0;
  std::vector<uint32_t> head_grads;

  // The frozen graph. Throws weft::Error when an input or output names a node that is not before
  // its user or an output the node does not have, or a head gradient is not a variable.
  Graph Freeze() &&;
};

class Graph {
 public:
  Graph();  // no nodes

  const std::vector<Node>& nodes() const { return s_->nodes; }
  const Node& node(uint32_t n) const { return s_->nodes[n]; }
  const std::vector<NodeEntry>& outputs() const { return s_->outputs; }
  size_t num_forward_outputs() const { return s_->num_forward_outputs; }
  const std::vector<uint32_t>& head_grads() const { return s_->head_grads; }
  // A mutable copy of the structure, for a pass to rewrite (typed attributes are not copied:
  // they describe this graph only).
  GraphBuilder ToBuilder() const;

  // Dense entry ids: the outputs of node 0, then node 1, ...
  uint32_t EntryId(NodeEntry e) const;
  uint32_t num_entries() const { return s_->entry_offset.back(); }
  uint32_t num_outputs(uint32_t node) const {
    return s_->entry_offset[node + 1] - s_->entry_offset[node];
  }
  // Variables in node order: the graph's arguments.
  std::vector<uint32_t> ArgumentNodes() const;
  // For every entry, how many node inputs and graph outputs read it.
  std::vector<uint32_t> EntryUseCounts() const { return UseCounts(false); }
  // The same, leaving out the inputs an op reads for their shape or dtype only
  // (Op::ReadsInputValues): how many readers need the entry's values (memory planning).
  std::vector<uint32_t> EntryValueUseCounts() const { return UseCounts(true); }

  // Typed attributes (shape inference, memory planning). With...() returns this graph with the
  // attribute set (one value per entry); the accessors throw weft::Error when it is not.
  Graph WithTypes(std::vector<Shape> shapes, std::vector<DType> dtypes) const;
  Graph WithMemoryPlan(MemoryPlan plan) const;
  bool has_types() const { return types_ != nullptr; }
  bool has_memory_plan() const { return memory_ != nullptr; }
  const std::vector<Shape>& shapes() const;
  const std::vector<DType>& dtypes() const;
  const MemoryPlan& memory() const;

 private:
  std::vector<uint32_t> UseCounts(bool values_only) const;
  friend struct GraphBuilder;
  struct Structure {
    std::vector<Node> nodes;
    std::vector<NodeEntry> outputs;
    size_t num_forward_outputs = 0;
    std::vector<uint32_t> head_grads;
    std::vector<uint32_t> entry_offset{0};  // per node, plus the total at the end
  };
  struct Types {
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
  };
  explicit Graph(std::shared_ptr<const Structure> s) : s_(std::move(s)) {}

  std::shared_ptr<const Structure> s_;  // never null
  std::shared_ptr<const Types> types_;
  std::shared_ptr<const MemoryPlan> memory_;
};

}  // namespace weft
