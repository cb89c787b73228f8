#include "graph/rewrite.h"

#include <limits>

#include "core/error.h"
#include "core/text.h"

namespace weft {

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

}  // namespace

GraphRewrite::GraphRewrite(const Graph& from)
    : from_(from),
      node_(from.nodes().size(), kNone),
      entry_(from.num_entries(), NodeEntry{kNone, 0}) {}

NodeEntry GraphRewrite::Map(NodeEntry e) const {
  const NodeEntry now = entry_[from_.EntryId(e)];
  WEFT_CHECK(now.node != kNone) << "graph rewrite: output " << e.index << " of node '"
                                << Abbreviate(from_.node(e.node).name)
                                << "' is read, but the rewrite has not placed it";
  return now;
}

uint32_t GraphRewrite::Keep(uint32_t n) {
  std::vector<NodeEntry> inputs = from_.node(n).inputs;
  for (NodeEntry& in : inputs) in = Map(in);
  return Keep(n, std::move(inputs));
}

uint32_t GraphRewrite::Keep(uint32_t n, std::vector<NodeEntry> inputs) {
  Node node = from_.node(n);
  node.inputs = std::move(inputs);
  const uint32_t now = AddLike(std::move(node), n);
  MapNode(n, now);
  for (uint32_t o = 0; o < from_.num_outputs(n); ++o) MapEntry({n, o}, {now, o});
  return now;
}

uint32_t GraphRewrite::Add(Node node, const std::vector<uint32_t>& typed_like) {
  if (from_.has_types()) {
    WEFT_CHECK_EQ(typed_like.size(), node.num_outputs())
        << "graph rewrite: node '" << Abbreviate(node.name) << "' needs one type per output";
    for (uint32_t e : typed_like) {
      shapes_.push_back(from_.shapes()[e]);
      dtypes_.push_back(from_.dtypes()[e]);
    }
  }
  b_.nodes.push_back(std::move(node));
  return num_nodes() - 1;
}

uint32_t GraphRewrite::AddLike(Node node, uint32_t like) {
  std::vector<uint32_t> entries;
  for (uint32_t o = 0; o < from_.num_outputs(like); ++o)
    entries.push_back(from_.EntryId({like, o}));
  return Add(std::move(node), entries);
}

void GraphRewrite::MapNode(uint32_t n, uint32_t now) { node_[n] = now; }

void GraphRewrite::MapEntry(NodeEntry e, NodeEntry now) { entry_[from_.EntryId(e)] = now; }

uint32_t GraphRewrite::NewNode(uint32_t n, const char* what) const {
  WEFT_CHECK(node_[n] != kNone) << "graph rewrite: node '" << Abbreviate(from_.node(n).name)
                                << "' is " << what << ", but the rewrite has not placed it";
  return node_[n];
}

Graph GraphRewrite::Finish() && {
  for (Node& node : b_.nodes) {
    if (node.forward_node >= 0)
      node.forward_node = NewNode(static_cast<uint32_t>(node.forward_node), "a forward node");
  }
  for (const NodeEntry& e : from_.outputs()) b_.outputs.push_back(Map(e));
  b_.num_forward_outputs = from_.num_forward_outputs();
  for (uint32_t h : from_.head_grads()) b_.head_grads.push_back(NewNode(h, "a head gradient"));
  Graph g = std::move(b_).Freeze();
  return from_.has_types() ? g.WithTypes(std::move(shapes_), std::move(dtypes_)) : g;
}

Node WithAttrs(Node n, const AttrMap& set) {
  AttrMap attrs = n.attrs.raw();
  for (const auto& [key, value] : set) attrs[key] = value;
  n.attrs = ParseAttrs(*n.op, attrs);
  return n;
}

Graph Renumber(const Graph& g, const std::vector<uint32_t>& order) {
  GraphRewrite r(g);
  for (uint32_t n : order) r.Keep(n);
  return std::move(r).Finish();
}

}  // namespace weft
