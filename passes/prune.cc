#include "passes/prune.h"

namespace weft {

Graph Prune(const Graph& g) {
  const std::vector<Node>& nodes = g.nodes();
  std::vector<bool> live(nodes.size(), false);
  for (const NodeEntry& e : g.outputs()) live[e.node] = true;
  for (size_t n = nodes.size(); n-- > 0;) {  // users come after their inputs
    if (nodes[n].is_variable()) live[n] = true;
    if (!live[n]) continue;
    for (const NodeEntry& e : nodes[n].inputs) live[e.node] = true;
  }
  std::vector<uint32_t> remap(nodes.size(), 0);
  GraphBuilder out;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (!live[n]) continue;
    remap[n] = static_cast<uint32_t>(out.nodes.size());
    Node node = nodes[n];
    for (NodeEntry& e : node.inputs) e.node = remap[e.node];
    if (node.forward_node >= 0) node.forward_node = remap[node.forward_node];
    out.nodes.push_back(std::move(node));
  }
  for (NodeEntry e : g.outputs()) out.outputs.push_back({remap[e.node], e.index});
  out.num_forward_outputs = g.num_forward_outputs();
  for (uint32_t h : g.head_grads()) out.head_grads.push_back(remap[h]);
  return std::move(out).Freeze();
}

}  // namespace weft
