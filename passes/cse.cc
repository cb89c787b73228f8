#include "passes/cse.h"

#include <sstream>
#include <unordered_map>

#include "passes/prune.h"

namespace weft {

namespace {

bool Mergeable(const Node& node) { return !node.is_variable() && !node.op->random && !node.op->stateful; }

// Everything that makes two nodes compute the same outputs.
std::string Key(const Node& node) {
  std::ostringstream key;
  key << node.op->name << '|';
  for (const auto& [name, value] : node.attrs.raw()) key << name << '=' << value << ';';
  key << '|';
  for (const NodeEntry& e : node.inputs) key << e.node << ':' << e.index << ',';
  return key.str();
}

// One sweep; returns how many nodes were merged into an earlier twin.
size_t MergeOnce(Graph& g) {
  std::vector<uint32_t> canonical(g.nodes.size());
  std::unordered_map<std::string, uint32_t> first;
  size_t merged = 0;
  for (uint32_t n = 0; n < g.nodes.size(); ++n) {
    canonical[n] = n;
    Node& node = g.nodes[n];
    for (NodeEntry& e : node.inputs) e.node = canonical[e.node];
    if (!Mergeable(node)) continue;
    auto [it, inserted] = first.emplace(Key(node), n);
    if (!inserted) {
      canonical[n] = it->second;
      ++merged;
    }
  }
  for (NodeEntry& e : g.outputs) e.node = canonical[e.node];
  return merged;
}

}  // namespace

Graph EliminateCommonExpr(const Graph& graph) {
  Graph g = graph;
  while (MergeOnce(g) > 0) {
    g.Reindex();
    g = Prune(g);
  }
  g.Reindex();
  return g;
}

}  // namespace weft
