#include "passes/prune.h"

#include "graph/rewrite.h"

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
  std::vector<uint32_t> order;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (live[n]) order.push_back(n);
  }
  return Renumber(g, order);
}

}  // namespace weft
