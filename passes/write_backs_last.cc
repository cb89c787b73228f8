#include "passes/write_backs_last.h"

#include "core/error.h"
#include "graph/rewrite.h"

namespace weft {

Graph WriteBacksLast(const Graph& g, size_t first) {
  std::vector<bool> last(g.nodes().size(), false);
  for (size_t o = first; o < g.outputs().size(); ++o) last[g.outputs()[o].node] = true;
  for (const Node& node : g.nodes()) {
    for (const NodeEntry& in : node.inputs)
      WEFT_CHECK(!last[in.node]) << "Bind: node '" << node.name << "' reads a write_back output";
  }
  std::vector<uint32_t> order;  // old node per new position
  for (bool moved : {false, true}) {
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      if (last[n] == moved) order.push_back(n);
    }
  }
  return Renumber(g, order);
}

}  // namespace weft
