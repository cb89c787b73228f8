// The graph IR: a frozen, topologically ordered list of nodes (an op with attributes and input
// entries, or a variable), the graph's outputs, and the typed attributes passes attach (shapes,
// dtypes, the memory plan). Built from a Symbol (symbol.h) and rewritten by passes (passes/),
// each a function from Graph to Graph.
//
//   Graph g = symbol.ToGraph();
//   for (uint32_t n = 0; n < g.nodes.size(); ++n) ... g.nodes[n].inputs ...
//   uint32_t e = g.EntryId({node, 0});   // dense id of an output, for per-entry attributes
#pragma once

#include <cstdint>
#include <optional>
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
  friend bool operator==(const NodeEntry& a, const NodeEntry& b) { return a.node == b.node && a.index == b.index; }
  friend bool operator<(const NodeEntry& a, const NodeEntry& b) {
    return a.node != b.node ? a.node < b.node : a.index < b.index;
  }
};

struct Node {
  const Op* op = nullptr;  // null: a variable (an argument of the graph)
  std::string name;
  Attrs attrs;  // parsed for `op`; raw() is what the user wrote
  std::vector<NodeEntry> inputs;
  // For backward nodes: the forward node they differentiate; -1 for forward nodes.
  int64_t forward_node = -1;
  bool is_backward() const { return forward_node >= 0; }

  bool is_variable() const { return op == nullptr; }
  uint32_t num_outputs() const { return op == nullptr ? 1 : static_cast<uint32_t>(NumOutputs(*op, attrs)); }
};

// How each entry is stored: a storage id shared by entries whose lifetimes do not overlap, or
// kExternal for entries bound to user arrays (arguments, gradients, outputs).
struct MemoryPlan {
  static constexpr int kExternal = -1;
  std::vector<int> storage_id;       // per entry
  std::vector<size_t> storage_bytes;  // per storage id
  std::vector<bool> inplace;          // per entry: shares its input's storage (the op runs in place)
  size_t total_bytes = 0;             // what the plan allocates
  size_t naive_bytes = 0;             // one buffer per internal entry, for comparison
};

class Graph {
 public:
  std::vector<Node> nodes;  // inputs before users
  std::vector<NodeEntry> outputs;

  // Outputs [0, num_forward_outputs) are the forward outputs; the gradient pass appends the
  // gradients it was asked for; head_grads[i] is the variable node holding the gradient that
  // flows into forward output i.
  size_t num_forward_outputs = 0;
  std::vector<uint32_t> head_grads;

  // Typed attributes set by passes (absent until the pass ran).
  std::optional<std::vector<Shape>> shapes;  // per entry
  std::optional<std::vector<DType>> dtypes;  // per entry
  std::optional<MemoryPlan> memory;

  // Dense entry ids: the outputs of node 0, then node 1, ...
  uint32_t EntryId(NodeEntry e) const;
  uint32_t num_entries() const;
  // Recomputes the entry offsets after nodes change (passes call it once they are done).
  void Reindex();
  // Variables in node order: the graph's arguments.
  std::vector<uint32_t> ArgumentNodes() const;
  // For every entry, how many node inputs and graph outputs read it.
  std::vector<uint32_t> EntryUseCounts() const;

 private:
  std::vector<uint32_t> entry_offset_;  // per node, plus the total at the end
};

}  // namespace weft
