#include "passes/prune.h"

namespace weft {

Graph Prune(const Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (const NodeEntry& e : g.outputs) live[e.node] = true;
  for (size_t n = g.nodes.size(); n-- > 0;) {  // users come after their inputs
    if (g.nodes[n].is_variable()) live[n] = true;
    if (!live[n]) continue;
    for (const NodeEntry& e : g.nodes[n].inputs) live[e.node] = true;
  }
  std::vector<uint32_t> remap(g.nodes.size(), 0);
  Graph out;
  for (uint32_t n = 0; n < g.nodes.size(); ++n) {
    if (!live[n]) continue;
    remap[n] = static_cast<uint32_t>(out.nodes.size());
    Node node = g.nodes[n];
    for (NodeEntry& e : node.inputs) e.node = remap[e.node];
    if (node.forward_node >= 0) node.forward_node = remap[node.forward_node];
    out.nodes.push_back(std::move(node));
  }
  for (NodeEntry e : g.outputs) out.outputs.push_back({remap[e.node], e.index});
  out.num_forward_outputs = g.num_forward_outputs;
  for (uint32_t h : g.head_grads) out.head_grads.push_back(remap[h]);
  out.Reindex();
  return out;
}

}  // namespace weft
