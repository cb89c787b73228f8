#include "passes/cse.h"

#include <sstream>
#include <unordered_map>

#include "passes/prune.h"

namespace weft {

namespace {

// Everything that makes two nodes compute the same outputs: op, attributes, inputs, and the
// version of each input (how many mutating nodes have updated it before this node).
std::string Key(const Graph& g, const Node& node, const std::vector<uint32_t>& version) {
  std::ostringstream key;
  key << node.op->name << '|';
  for (const auto& [name, value] : node.attrs.raw()) key << name << '=' << value << ';';
  key << '|';
  for (const NodeEntry& e : node.inputs)
    key << e.node << ':' << e.index << '@' << version[g.EntryId(e)] << ',';
  return key.str();
}

// One sweep over `b`, a copy of `g`'s structure: points every input at its node's earliest twin;
// returns how many nodes were merged into an earlier twin.
size_t MergeOnce(const Graph& g, GraphBuilder& b) {
  std::vector<uint32_t> canonical(b.nodes.size());
  std::vector<uint32_t> version(g.num_entries(), 0);  // per entry of g (canonical entries only)
  std::unordered_map<std::string, uint32_t> first;
  size_t merged = 0;
  for (uint32_t n = 0; n < b.nodes.size(); ++n) {
    canonical[n] = n;
    Node& node = b.nodes[n];
    for (NodeEntry& e : node.inputs) e.node = canonical[e.node];
    if (node.is_variable()) continue;
    if (node.op->HasEffects()) {
      for (int i : node.op->mutate_inputs) ++version[g.EntryId(node.inputs[i])];
      continue;
    }
    auto [it, inserted] = first.emplace(Key(g, node, version), n);
    if (!inserted) {
      canonical[n] = it->second;
      ++merged;
    }
  }
  for (NodeEntry& e : b.outputs) e.node = canonical[e.node];
  return merged;
}

}  // namespace

Graph EliminateCommonExpr(const Graph& graph) {
  Graph g = graph;
  for (;;) {
    GraphBuilder b = g.ToBuilder();
    if (MergeOnce(g, b) == 0) return g;
    g = Prune(std::move(b).Freeze());
  }
}

}  // namespace weft
