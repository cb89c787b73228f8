#include "passes/fuse_pointwise.h"

#include <memory>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "graph/rewrite.h"
#include "graph/strongly_connected.h"
#include "ops/fusion/fused_group.h"
#include "passes/internal/fusion_partition.h"
#include "passes/rematerialize.h"

namespace weft {

namespace {

// "fused(mul_scalar, add_scalar, relu)", naming at most 10 ops.
std::string Label(const Graph& g, const std::vector<uint32_t>& members) {
  std::ostringstream os;
  os << "fused(";
  for (size_t i = 0; i < members.size() && i < 10; ++i)
    os << (i ? ", " : "") << g.node(members[i]).op->name;
  if (members.size() > 10) os << ", ... " << members.size() << " ops";
  os << ")";
  return os.str();
}

// Rewrites a partitioned graph: every group (FusionGroups) becomes one fused node, placed in a
// topological order of the condensed graph, whose units are the nodes outside groups and the
// groups (a group's consumers may sit between its members in the old order).
class Rewriter {
 public:
  Rewriter(const Graph& g, std::vector<std::vector<uint32_t>> groups)
      : g_(g), unit_(g.nodes().size()), groups_(std::move(groups)), rewrite_(g) {
    SetUnits();
  }

  Graph Run(FusionStats* stats) {
    if (stats != nullptr) *stats = Stats();
    if (groups_.empty()) return g_;
    std::vector<uint32_t> order = Order();
    if (order.size() != NumUnits()) {  // a cycle through groups: dissolve the groups on cycles
      DissolveCycles();
      if (stats != nullptr) *stats = Stats();
      if (groups_.empty()) return g_;
      order = Order();
      WEFT_CHECK_EQ(order.size(), NumUnits()) << "fusion: the fused graph has a cycle";
    }
    value_of_.assign(g_.num_entries(), -1);
    MarkExternalUses();
    for (uint32_t u : order) {
      if (IsNode(u)) {
        rewrite_.Keep(u);
      } else {
        EmitGroup(u - static_cast<uint32_t>(g_.nodes().size()));
      }
    }
    return std::move(rewrite_).Finish();
  }

 private:
  bool IsNode(uint32_t unit) const { return unit < g_.nodes().size(); }

  void SetUnits() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) unit_[n] = n;
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      for (uint32_t n : groups_[gi]) unit_[n] = static_cast<uint32_t>(g_.nodes().size() + gi);
    }
  }

  // Entries read by a node of another unit, or graph outputs.
  void MarkExternalUses() {
    external_.assign(g_.num_entries(), false);
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      for (const NodeEntry& in : g_.node(n).inputs) {
        if (unit_[in.node] != unit_[n]) external_[g_.EntryId(in)] = true;
      }
    }
    for (const NodeEntry& e : g_.outputs()) external_[g_.EntryId(e)] = true;
  }

  FusionStats Stats() const {
    FusionStats stats;
    stats.groups = groups_.size();
    for (const auto& members : groups_) stats.fused_nodes += members.size();
    return stats;
  }
  size_t NumUnits() const { return g_.nodes().size() + groups_.size() - Stats().fused_nodes; }

  // The condensed graph: for each unit, the units that read it (once per edge of the graph).
  std::vector<std::vector<uint32_t>> Successors() const {
    std::vector<std::vector<uint32_t>> next(g_.nodes().size() + groups_.size());
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      for (const NodeEntry& in : g_.node(n).inputs) {
        if (unit_[in.node] != unit_[n]) next[unit_[in.node]].push_back(unit_[n]);
      }
    }
    return next;
  }

  // Kahn's algorithm over units, smallest first node first (the old order where it is valid).
  // Shorter than NumUnits() when groups close a cycle.
  std::vector<uint32_t> Order() const {
    const size_t n_nodes = g_.nodes().size(), n_units = n_nodes + groups_.size();
    std::vector<uint32_t> indegree(n_units, 0), first(n_units, 0);
    const std::vector<std::vector<uint32_t>> next = Successors();
    for (uint32_t u = 0; u < n_units; ++u) {
      if (u < n_nodes) first[u] = u;
      for (uint32_t v : next[u]) ++indegree[v];
    }
    for (size_t gi = 0; gi < groups_.size(); ++gi) first[n_nodes + gi] = groups_[gi].front();
    using Item = std::pair<uint32_t, uint32_t>;  // (first node, unit)
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
    for (uint32_t u = 0; u < n_units; ++u) {
      const bool member = IsNode(u) && unit_[u] != u;  // a node inside a group: not a unit
      if (!member && indegree[u] == 0) ready.push({first[u], u});
    }
    std::vector<uint32_t> order;
    while (!ready.empty()) {
      const uint32_t u = ready.top().second;
      ready.pop();
      order.push_back(u);
      for (uint32_t v : next[u]) {
        if (--indegree[v] == 0) ready.push({first[v], v});
      }
    }
    return order;
  }

  void DissolveCycles();
  void EmitGroup(uint32_t gi);
  std::shared_ptr<FusedGroup> NewGroup(const std::vector<uint32_t>& members) const;
  void AddGroupInputs(uint32_t gi, FusedGroup& group, Node& fused);
  void AddSteps(const std::vector<uint32_t>& members, FusedGroup& group);
  std::vector<uint32_t> AddGroupOutputs(const std::vector<uint32_t>& members, uint32_t index,
                                        FusedGroup& group);

  const Graph& g_;
  std::vector<uint32_t> unit_;                 // per node: itself, or n_nodes + its group
  std::vector<std::vector<uint32_t>> groups_;  // members, in node order
  std::vector<bool> external_;                 // per entry
  GraphRewrite rewrite_;
  std::vector<int64_t> value_of_;  // per entry: its value in the group being emitted, else -1
  std::vector<uint32_t> touched_;  // the entries value_of_ holds a value for
};

// The partition keeps each group convex as far as the groups that reach each node tell; when
// groups that grew later meet (each reaching the other only through the other's later members),
// the condensed graph can still have a cycle. Every group on one is split back into its nodes:
// the strongly connected components of the condensed graph that hold more than one unit. One
// round is enough: a cycle left would contract to one in the graph before.
void Rewriter::DissolveCycles() {
  std::vector<bool> dissolve(groups_.size(), false);
  for (const std::vector<uint32_t>& component : StronglyConnectedComponents(Successors())) {
    if (component.size() < 2) continue;
    for (uint32_t u : component) {
      if (!IsNode(u)) dissolve[u - g_.nodes().size()] = true;
    }
  }
  std::vector<std::vector<uint32_t>> kept;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    if (!dissolve[gi]) kept.push_back(std::move(groups_[gi]));
  }
  groups_ = std::move(kept);
  SetUnits();
}

// The group's description before its values: label, phase, element count.
std::shared_ptr<FusedGroup> Rewriter::NewGroup(const std::vector<uint32_t>& members) const {
  auto group = std::make_shared<FusedGroup>();
  group->label = Label(g_, members);
  group->backward = g_.node(members[0]).is_backward();
  group->size = g_.shapes()[g_.EntryId({members[0], 0})].Size();
  return group;
}

// The group's inputs: the entries of other units its members read, in order of first read.
void Rewriter::AddGroupInputs(uint32_t gi, FusedGroup& group, Node& fused) {
  const uint32_t unit = static_cast<uint32_t>(g_.nodes().size()) + gi;
  for (uint32_t n : groups_[gi]) {
    for (const NodeEntry& in : g_.node(n).inputs) {
      const uint32_t e = g_.EntryId(in);
      if (unit_[in.node] == unit || value_of_[e] >= 0) continue;
      value_of_[e] = group.num_inputs++;
      touched_.push_back(e);
      fused.inputs.push_back(rewrite_.Map(in));
      group.shapes.push_back(g_.shapes()[e]);
      group.dtypes.push_back(g_.dtypes()[e]);
    }
  }
}

// One step per member, in node order, reading the group's values and adding its outputs to them.
void Rewriter::AddSteps(const std::vector<uint32_t>& members, FusedGroup& group) {
  for (uint32_t n : members) {
    FusedGroup::Step step;
    step.op = g_.node(n).op;
    step.attrs = g_.node(n).attrs;
    step.name = g_.node(n).name;
    for (const NodeEntry& in : g_.node(n).inputs)
      step.args.push_back(static_cast<uint32_t>(value_of_[g_.EntryId(in)]));
    step.first_output = group.num_values();
    step.num_outputs = g_.num_outputs(n);
    for (uint32_t o = 0; o < step.num_outputs; ++o) {
      const uint32_t e = g_.EntryId({n, o});
      value_of_[e] = group.num_values();
      touched_.push_back(e);
      group.shapes.push_back(g_.shapes()[e]);
      group.dtypes.push_back(g_.dtypes()[e]);
    }
    group.steps.push_back(std::move(step));
  }
}

// The group's outputs: its members' entries read outside it, mapped to the outputs of the fused
// node `index`. Returns those entries, in order.
std::vector<uint32_t> Rewriter::AddGroupOutputs(const std::vector<uint32_t>& members,
                                                uint32_t index, FusedGroup& group) {
  std::vector<uint32_t> outputs;
  for (uint32_t n : members) {
    for (uint32_t o = 0; o < g_.num_outputs(n); ++o) {
      const uint32_t e = g_.EntryId({n, o});
      if (!external_[e]) continue;
      rewrite_.MapEntry({n, o}, {index, static_cast<uint32_t>(outputs.size())});
      outputs.push_back(e);
      group.outputs.push_back(static_cast<uint32_t>(value_of_[e]));
    }
  }
  return outputs;
}

// Group gi as one `_fused_pointwise` node; its members' outside readers read its outputs.
void Rewriter::EmitGroup(uint32_t gi) {
  const std::vector<uint32_t>& members = groups_[gi];
  std::shared_ptr<FusedGroup> group = NewGroup(members);
  Node fused;
  fused.op = &GetOp("_fused_pointwise");
  fused.name = "fused" + std::to_string(gi) + "_" + g_.node(members[0]).name;
  fused.forward_node = group->backward ? g_.node(members[0]).forward_node : -1;  // an old node
  AddGroupInputs(gi, *group, fused);
  AddSteps(members, *group);
  const uint32_t index = rewrite_.num_nodes();
  const std::vector<uint32_t> outputs = AddGroupOutputs(members, index, *group);
  for (uint32_t e : touched_) value_of_[e] = -1;
  touched_.clear();
  group->Check();
  fused.attrs = FusedAttrs(std::move(group));
  rewrite_.Add(std::move(fused), outputs);
  for (uint32_t n : members) rewrite_.MapNode(n, index);  // for the backward nodes naming n
}

}  // namespace

Graph FusePointwise(const Graph& graph, FusionStats* stats, bool recompute) {
  WEFT_CHECK(graph.has_types()) << "fusion: run shape and type inference first";
  size_t recomputed = 0;
  const Graph g = recompute ? Rematerialize(graph, &recomputed) : graph;
  Graph fused = Rewriter(g, FusionGroups(g)).Run(stats);
  if (stats != nullptr) stats->recomputed = recomputed;
  return fused;
}

}  // namespace weft
