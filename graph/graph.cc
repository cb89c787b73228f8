#include "graph/graph.h"

#include "core/error.h"
#include "core/text.h"

namespace weft {

namespace {

// "node 'fc1' input 2", or "output 0" when `user` is past the last node.
std::string Where(const std::vector<Node>& nodes, size_t user, size_t slot) {
  return user < nodes.size()
             ? "node '" + Abbreviate(nodes[user].name) + "' input " + std::to_string(slot)
             : "output " + std::to_string(slot);
}

// Throws unless `e` is an output of a node before `user` (a node index, or nodes.size() for the
// graph's outputs); `offset` holds the entry offsets of the nodes before `user`.
void CheckEntry(const std::vector<Node>& nodes, const std::vector<uint32_t>& offset, NodeEntry e,
                size_t user, size_t slot) {
  WEFT_CHECK_LT(e.node, user) << "graph: " << Where(nodes, user, slot) << " reads node " << e.node
                              << ", expected a node before it";
  WEFT_CHECK_LT(e.index, offset[e.node + 1] - offset[e.node])
      << "graph: " << Where(nodes, user, slot) << " reads a missing output of node '"
      << Abbreviate(nodes[e.node].name) << "'";
}

}  // namespace

Graph GraphBuilder::Freeze() && {
  auto s = std::make_shared<Graph::Structure>();
  s->entry_offset.assign(nodes.size() + 1, 0);
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (size_t i = 0; i < nodes[n].inputs.size(); ++i)
      CheckEntry(nodes, s->entry_offset, nodes[n].inputs[i], n, i);
    s->entry_offset[n + 1] = s->entry_offset[n] + nodes[n].num_outputs();
  }
  for (size_t o = 0; o < outputs.size(); ++o)
    CheckEntry(nodes, s->entry_offset, outputs[o], nodes.size(), o);
  WEFT_CHECK_LE(num_forward_outputs, outputs.size()) << "graph: forward outputs";
  for (uint32_t h : head_grads) {
    WEFT_CHECK(h < nodes.size() && nodes[h].is_variable())
        << "graph: head gradient " << h << " is not a variable";
  }
  s->nodes = std::move(nodes);
  s->outputs = std::move(outputs);
  s->num_forward_outputs = num_forward_outputs;
  s->head_grads = std::move(head_grads);
  return Graph(std::move(s));
}

Graph::Graph() : s_(std::make_shared<const Structure>()) {}

GraphBuilder Graph::ToBuilder() const {
  return GraphBuilder{s_->nodes, s_->outputs, s_->num_forward_outputs, s_->head_grads};
}

uint32_t Graph::EntryId(NodeEntry e) const {
  WEFT_CHECK_LT(e.node, s_->nodes.size()) << "graph: no node " << e.node;
  WEFT_CHECK_LT(e.index, num_outputs(e.node))
      << "graph: node '" << Abbreviate(s_->nodes[e.node].name) << "' has no output " << e.index;
  return s_->entry_offset[e.node] + e.index;
}

std::vector<uint32_t> Graph::ArgumentNodes() const {
  std::vector<uint32_t> args;
  for (uint32_t n = 0; n < s_->nodes.size(); ++n) {
    if (s_->nodes[n].is_variable()) args.push_back(n);
  }
  return args;
}

std::vector<uint32_t> Graph::UseCounts(bool values_only) const {
  std::vector<uint32_t> uses(num_entries(), 0);
  for (const Node& node : s_->nodes) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!values_only || node.op->ReadsInputValues(node.attrs, static_cast<int>(i)))
        ++uses[EntryId(node.inputs[i])];
    }
  }
  for (const NodeEntry& e : s_->outputs) ++uses[EntryId(e)];
  return uses;
}

Graph Graph::WithTypes(std::vector<Shape> shapes, std::vector<DType> dtypes) const {
  WEFT_CHECK_EQ(shapes.size(), num_entries()) << "graph: one shape per entry";
  WEFT_CHECK_EQ(dtypes.size(), num_entries()) << "graph: one dtype per entry";
  Graph g = *this;
  g.types_ = std::make_shared<const Types>(Types{std::move(shapes), std::move(dtypes)});
  return g;
}

Graph Graph::WithMemoryPlan(MemoryPlan plan) const {
  WEFT_CHECK_EQ(plan.storage_id.size(), num_entries()) << "graph: one storage id per entry";
  Graph g = *this;
  g.memory_ = std::make_shared<const MemoryPlan>(std::move(plan));
  return g;
}

const std::vector<Shape>& Graph::shapes() const {
  WEFT_CHECK(types_ != nullptr) << "graph: no shapes yet; run InferShapesAndTypes first";
  return types_->shapes;
}

const std::vector<DType>& Graph::dtypes() const {
  WEFT_CHECK(types_ != nullptr) << "graph: no dtypes yet; run InferShapesAndTypes first";
  return types_->dtypes;
}

const MemoryPlan& Graph::memory() const {
  WEFT_CHECK(memory_ != nullptr) << "graph: no memory plan yet; run PlanMemory first";
  return *memory_;
}

}  // namespace weft
