#include "passes/internal/fusion_partition.h"

#include <algorithm>

#include "passes/fusable.h"
#include "passes/fuse_pointwise.h"

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

}  // namespace

std::vector<std::vector<uint32_t>> FusionGroups(const Graph& g) {
  Partition p(g);
  p.Run();
  const uint32_t n_nodes = static_cast<uint32_t>(g.nodes().size());
  std::vector<uint32_t> count(n_nodes, 0);
  for (uint32_t n = 0; n < n_nodes; ++n) {
    if (p.Fusable(n)) ++count[p.Find(n)];
  }
  std::vector<std::vector<uint32_t>> groups;
  std::vector<int> group_of_root(n_nodes, -1);
  for (uint32_t n = 0; n < n_nodes; ++n) {
    if (!p.Fusable(n) || count[p.Find(n)] < 2) continue;
    int& gi = group_of_root[p.Find(n)];
    if (gi < 0) gi = static_cast<int>(groups.size()), groups.emplace_back();
    groups[gi].push_back(n);
  }
  return groups;
}

}  // namespace weft
