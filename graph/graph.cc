#include "graph/graph.h"

#include "core/error.h"

namespace weft {

void Graph::Reindex() {
  entry_offset_.assign(nodes.size() + 1, 0);
  for (size_t n = 0; n < nodes.size(); ++n) entry_offset_[n + 1] = entry_offset_[n] + nodes[n].num_outputs();
}

uint32_t Graph::EntryId(NodeEntry e) const {
  WEFT_CHECK_EQ(entry_offset_.size(), nodes.size() + 1) << "graph: Reindex() was not called after editing nodes";
  WEFT_CHECK_LT(e.node, nodes.size()) << "graph: no node " << e.node;
  WEFT_CHECK_LT(e.index, nodes[e.node].num_outputs()) << "graph: node '" << nodes[e.node].name << "' has no output "
                                                      << e.index;
  return entry_offset_[e.node] + e.index;
}

uint32_t Graph::num_entries() const {
  WEFT_CHECK_EQ(entry_offset_.size(), nodes.size() + 1) << "graph: Reindex() was not called after editing nodes";
  return entry_offset_.back();
}

std::vector<uint32_t> Graph::ArgumentNodes() const {
  std::vector<uint32_t> args;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].is_variable()) args.push_back(n);
  }
  return args;
}

std::vector<uint32_t> Graph::EntryUseCounts() const {
  std::vector<uint32_t> uses(num_entries(), 0);
  for (const Node& node : nodes) {
    for (const NodeEntry& e : node.inputs) ++uses[EntryId(e)];
  }
  for (const NodeEntry& e : outputs) ++uses[EntryId(e)];
  return uses;
}

}  // namespace weft
