#include "passes/fuse_pointwise.h"

#include <algorithm>
#include <memory>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "ops/fusion/fused_group.h"
#include "passes/fusable.h"
#include "passes/rematerialize.h"

namespace weft {

namespace {

// A set of group ids, at most kReachCap of them; past that, "any group" (saturated).
struct GroupSet {
  std::vector<uint32_t> ids;
  bool saturated = false;
};

// Union-find over nodes: each node starts as a group of its own; fusion merges groups.
class Partition {
 public:
  explicit Partition(const Graph& g)
      : g_(g), parent_(g.nodes().size()), size_(g.nodes().size(), -1) {
    for (uint32_t n = 0; n < parent_.size(); ++n) parent_[n] = n;
    reach_.resize(parent_.size());
    entering_.resize(parent_.size());
    stamp_.assign(parent_.size(), 0);
    for (uint32_t n = 0; n < parent_.size(); ++n) size_[n] = FusableSize(g, n);
  }

  void Run() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (size_[n] >= 0) Join(n);
      reach_[n] = Reach(n);
    }
  }

  uint32_t Find(uint32_t n) {
    while (parent_[n] != n) n = parent_[n] = parent_[parent_[n]];
    return n;
  }
  bool Fusable(uint32_t n) const { return size_[n] >= 0; }

 private:
  bool Contains(const GroupSet& s, const std::vector<uint32_t>& groups) {
    if (s.saturated) return true;
    for (uint32_t id : s.ids) {
      if (std::find(groups.begin(), groups.end(), Find(id)) != groups.end()) return true;
    }
    return false;
  }

  // Builds a GroupSet of roots without duplicates: Begin, then Add and AddAll, then the set.
  void Begin() {
    building_ = GroupSet{};
    ++token_;
  }
  void Add(uint32_t id) {
    if (building_.saturated) return;
    id = Find(id);
    if (stamp_[id] == token_) return;
    stamp_[id] = token_;
    if (building_.ids.size() == kReachCap) {
      building_ = GroupSet{{}, true};
      return;
    }
    building_.ids.push_back(id);
  }
  void AddAll(const GroupSet& from) {
    if (from.saturated) building_ = GroupSet{{}, true};
    for (uint32_t id : from.ids) Add(id);
  }

  // The groups that reach node n (its own included).
  GroupSet Reach(uint32_t n) {
    Begin();
    Add(n);
    for (const NodeEntry& in : g_.node(n).inputs) AddAll(reach_[in.node]);
    return std::move(building_);
  }

  // Whether node n may join the groups `with` (roots) without a cycle: no input of n outside them
  // is reached by one of them, and no one of them reaches another through a node outside.
  bool CanJoin(uint32_t n, const std::vector<uint32_t>& with) {
    for (const NodeEntry& in : g_.node(n).inputs) {
      if (std::find(with.begin(), with.end(), Find(in.node)) == with.end() &&
          Contains(reach_[in.node], with)) {
        return false;
      }
    }
    if (with.size() < 2) return true;
    for (uint32_t h : with) {
      if (Contains(entering_[h], with)) return false;  // reaches h from outside h
    }
    return true;
  }

  // The groups n may join: those of its data inputs of the same size and phase, taken greedily
  // while the union stays convex. Then n and they become one group.
  void Join(uint32_t n) {
    const Node& node = g_.node(n);
    std::vector<uint32_t> with;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const uint32_t p = node.inputs[i].node;
      if (!IsDataInput(node.op->pointwise.kind, i) || !Fusable(p) || size_[p] != size_[n]) continue;
      if (g_.node(p).is_backward() != node.is_backward()) continue;
      const uint32_t root = Find(p);
      if (std::find(with.begin(), with.end(), root) != with.end()) continue;
      with.push_back(root);
      if (!CanJoin(n, with)) with.pop_back();
    }
    for (uint32_t h : with) parent_[h] = n;  // n becomes the root
    Begin();
    for (uint32_t h : with) AddAll(entering_[h]);
    for (const NodeEntry& in : node.inputs) {
      if (Find(in.node) != n) AddAll(reach_[in.node]);
    }
    entering_[n] = std::move(building_);
  }

  const Graph& g_;
  std::vector<uint32_t> parent_;
  std::vector<int64_t> size_;       // FusableSize per node
  std::vector<GroupSet> reach_;     // per node: the groups that reach it
  std::vector<GroupSet> entering_;  // per root: the groups that reach it from outside it
  GroupSet building_;
  std::vector<uint64_t> stamp_;  // per node: token_ when in building_
  uint64_t token_ = 0;
};

// Rewrites a partitioned graph: every group of two or more nodes becomes one fused node, placed
// in a topological order of the condensed graph (a group's consumers may sit between its members
// in the old order).
class Rewriter {
 public:
  Rewriter(const Graph& g, Partition& p) : g_(g), unit_(g.nodes().size()) {
    const uint32_t n_nodes = static_cast<uint32_t>(g.nodes().size());
    std::vector<uint32_t> count(n_nodes, 0);
    for (uint32_t n = 0; n < n_nodes; ++n) {
      if (p.Fusable(n)) ++count[p.Find(n)];
    }
    std::vector<int> group_of_root(n_nodes, -1);
    for (uint32_t n = 0; n < n_nodes; ++n) {
      unit_[n] = n;
      if (!p.Fusable(n) || count[p.Find(n)] < 2) continue;
      int& gi = group_of_root[p.Find(n)];
      if (gi < 0) gi = static_cast<int>(groups_.size()), groups_.emplace_back();
      groups_[gi].push_back(n);
      unit_[n] = n_nodes + gi;
    }
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
    new_index_.assign(g_.nodes().size() + groups_.size(), 0);
    value_of_.assign(g_.num_entries(), -1);
    MarkExternalUses();
    for (uint32_t u : order) {
      if (u < g_.nodes().size()) {
        EmitNode(u);
      } else {
        EmitGroup(u - static_cast<uint32_t>(g_.nodes().size()));
      }
    }
    return Finish();
  }

 private:
  bool IsNode(uint32_t unit) const { return unit < g_.nodes().size(); }

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

  NodeEntry Map(const NodeEntry& e) const { return new_entry_[g_.EntryId(e)]; }

  void AddTypes(uint32_t old_entry) {
    shapes_.push_back(g_.shapes()[old_entry]);
    dtypes_.push_back(g_.dtypes()[old_entry]);
  }

  void EmitNode(uint32_t n) {
    Node node = g_.node(n);
    for (NodeEntry& e : node.inputs) e = Map(e);
    const uint32_t index = static_cast<uint32_t>(b_.nodes.size());
    new_index_[n] = index;
    b_.nodes.push_back(std::move(node));
    for (uint32_t o = 0; o < g_.num_outputs(n); ++o) {
      new_entry_[g_.EntryId({n, o})] = {index, o};
      AddTypes(g_.EntryId({n, o}));
    }
  }

  void EmitGroup(uint32_t gi);
  Graph Finish();

  const Graph& g_;
  std::vector<uint32_t> unit_;                 // per node: itself, or n_nodes + its group
  std::vector<std::vector<uint32_t>> groups_;  // members, in node order
  std::vector<bool> external_;                 // per entry
  GraphBuilder b_;
  std::vector<NodeEntry> new_entry_ = std::vector<NodeEntry>(g_.num_entries());
  std::vector<uint32_t> new_index_;  // per unit: its node in b_
  std::vector<int64_t> value_of_;    // per entry: its value in the group being emitted
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
};

// The partition keeps each group convex as far as the groups that reach each node tell; when
// groups that grew later meet (each reaching the other only through the other's later members),
// the condensed graph can still have a cycle. Every group on one is split back into its nodes:
// the strongly connected components (Tarjan, iterative) of the condensed graph that hold more
// than one unit. One round is enough: a cycle left would contract to one in the graph before.
void Rewriter::DissolveCycles() {
  const std::vector<std::vector<uint32_t>> next = Successors();
  const uint32_t n_units = static_cast<uint32_t>(next.size()), none = UINT32_MAX;
  std::vector<uint32_t> index(n_units, none), low(n_units, 0), stack, component(n_units, none);
  std::vector<bool> on_stack(n_units, false), dissolve(groups_.size(), false);
  uint32_t counter = 0;
  std::vector<std::pair<uint32_t, size_t>> calls;  // (unit, next successor to visit)
  for (uint32_t root = 0; root < n_units; ++root) {
    if (index[root] != none) continue;
    calls.push_back({root, 0});
    index[root] = low[root] = counter++;
    stack.push_back(root), on_stack[root] = true;
    while (!calls.empty()) {
      auto& [u, i] = calls.back();
      if (i < next[u].size()) {
        const uint32_t v = next[u][i++];
        if (index[v] == none) {
          index[v] = low[v] = counter++;
          stack.push_back(v), on_stack[v] = true;
          calls.push_back({v, 0});
        } else if (on_stack[v]) {
          low[u] = std::min(low[u], index[v]);
        }
        continue;
      }
      const uint32_t done = u;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[done]);
      if (low[done] != index[done]) continue;
      std::vector<uint32_t> scc;
      for (uint32_t w = none; w != done;) {
        w = stack.back();
        stack.pop_back(), on_stack[w] = false;
        scc.push_back(w);
      }
      if (scc.size() < 2) continue;
      for (uint32_t w : scc) {
        if (w >= g_.nodes().size()) dissolve[w - g_.nodes().size()] = true;
      }
    }
  }
  std::vector<std::vector<uint32_t>> kept;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    if (!dissolve[gi]) kept.push_back(std::move(groups_[gi]));
  }
  groups_ = std::move(kept);
  for (uint32_t n = 0; n < g_.nodes().size(); ++n) unit_[n] = n;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (uint32_t n : groups_[gi]) unit_[n] = static_cast<uint32_t>(g_.nodes().size() + gi);
  }
}

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

void Rewriter::EmitGroup(uint32_t gi) {
  const std::vector<uint32_t>& members = groups_[gi];
  const uint32_t unit = static_cast<uint32_t>(g_.nodes().size()) + gi;
  auto group = std::make_shared<FusedGroup>();
  group->label = Label(g_, members);
  group->backward = g_.node(members[0]).is_backward();
  group->size = g_.shapes()[g_.EntryId({members[0], 0})].Size();
  Node fused;
  fused.op = &GetOp("_fused_pointwise");
  fused.name = "fused" + std::to_string(gi) + "_" + g_.node(members[0]).name;
  fused.forward_node = group->backward ? g_.node(members[0]).forward_node : -1;
  std::vector<int64_t>& value_of = value_of_;  // reset below for the next group
  std::vector<uint32_t> touched;
  for (uint32_t n : members) {  // inputs: entries of other units, in order of first read
    for (const NodeEntry& in : g_.node(n).inputs) {
      const uint32_t e = g_.EntryId(in);
      if (unit_[in.node] == unit || value_of[e] >= 0) continue;
      value_of[e] = group->num_inputs++;
      touched.push_back(e);
      fused.inputs.push_back(Map(in));
      group->shapes.push_back(g_.shapes()[e]);
      group->dtypes.push_back(g_.dtypes()[e]);
    }
  }
  for (uint32_t n : members) {
    FusedGroup::Step step;
    step.op = g_.node(n).op;
    step.attrs = g_.node(n).attrs;
    step.name = g_.node(n).name;
    for (const NodeEntry& in : g_.node(n).inputs)
      step.args.push_back(static_cast<uint32_t>(value_of[g_.EntryId(in)]));
    step.first_output = group->num_values();
    step.num_outputs = g_.num_outputs(n);
    for (uint32_t o = 0; o < step.num_outputs; ++o) {
      const uint32_t e = g_.EntryId({n, o});
      value_of[e] = group->num_values();
      touched.push_back(e);
      group->shapes.push_back(g_.shapes()[e]);
      group->dtypes.push_back(g_.dtypes()[e]);
    }
    group->steps.push_back(std::move(step));
  }
  const uint32_t index = static_cast<uint32_t>(b_.nodes.size());
  for (uint32_t n : members) {
    for (uint32_t o = 0; o < g_.num_outputs(n); ++o) {
      const uint32_t e = g_.EntryId({n, o});
      if (!external_[e]) continue;
      new_entry_[e] = {index, static_cast<uint32_t>(group->outputs.size())};
      group->outputs.push_back(static_cast<uint32_t>(value_of[e]));
      AddTypes(e);
    }
  }
  for (uint32_t e : touched) value_of[e] = -1;
  group->Check();
  fused.attrs = FusedAttrs(std::move(group));
  new_index_[unit] = index;
  b_.nodes.push_back(std::move(fused));
}

Graph Rewriter::Finish() {
  for (Node& node : b_.nodes) {  // a backward node names its forward node's unit
    if (node.forward_node >= 0) node.forward_node = new_index_[unit_[node.forward_node]];
  }
  for (const NodeEntry& e : g_.outputs()) b_.outputs.push_back(Map(e));
  b_.num_forward_outputs = g_.num_forward_outputs();
  for (uint32_t h : g_.head_grads()) b_.head_grads.push_back(new_index_[h]);
  return std::move(b_).Freeze().WithTypes(std::move(shapes_), std::move(dtypes_));
}

}  // namespace

Graph FusePointwise(const Graph& graph, FusionStats* stats, bool recompute) {
  WEFT_CHECK(graph.has_types()) << "fusion: run shape and type inference first";
  size_t recomputed = 0;
  const Graph g = recompute ? Rematerialize(graph, &recomputed) : graph;
  Partition partition(g);
  partition.Run();
  Graph fused = Rewriter(g, partition).Run(stats);
  if (stats != nullptr) stats->recomputed = recomputed;
  return fused;
}

}  // namespace weft
