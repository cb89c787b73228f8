#include "passes/plan_memory.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "ops/op.h"

namespace weft {

namespace {

class Planner {
 public:
  Planner(const Graph& g, const std::vector<bool>& external, const PlanOptions& options)
      : g_(g), external_(external), options_(options), uses_(g.EntryValueUseCounts()) {
    plan_.storage_id.assign(g.num_entries(), MemoryPlan::kExternal);
    plan_.inplace.assign(g.num_entries(), false);
    owner_.assign(g.num_entries(), true);
  }

  MemoryPlan Run() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      const Node& node = g_.node(n);
      if (node.is_variable()) continue;
      for (uint32_t o = 0; o < g_.num_outputs(n); ++o) Assign(n, o);
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.op->ReadsInputValues(node.attrs, static_cast<int>(i)))
          Release(g_.EntryId(node.inputs[i]));
      }
      for (uint32_t o = 0; o < g_.num_outputs(n); ++o) {
        if (uses_[g_.EntryId({n, o})] == 0) Free(g_.EntryId({n, o}));  // nothing reads it
      }
    }
    for (size_t bytes : plan_.storage_bytes) plan_.total_bytes += bytes;
    return plan_;
  }

 private:
  size_t Bytes(uint32_t e) const {
    return static_cast<size_t>(g_.shapes()[e].Size()) * DTypeSize(g_.dtypes()[e]);
  }

  void Assign(uint32_t n, uint32_t o) {
    const uint32_t e = g_.EntryId({n, o});
    if (IsUpdatedArgument(n, o)) {  // the argument's own array (the bound graph gives it)
      plan_.inplace[e] = true;
      return;
    }
    if (external_[e]) return;
    plan_.naive_bytes += Bytes(e);
    if (options_.inplace && (TryInplace(n, o, e) || TryView(n, o, e))) return;
    plan_.storage_id[e] = options_.reuse ? TakeFree(Bytes(e)) : -1;
    if (plan_.storage_id[e] < 0) {
      plan_.storage_id[e] = static_cast<int>(plan_.storage_bytes.size());
      plan_.storage_bytes.push_back(Bytes(e));
      holders_.push_back(0);
    }
    holders_[plan_.storage_id[e]] = 1;
  }

  // Output o is an input the op updates (Op::UpdatedInput) that is bound to a user array.
  bool IsUpdatedArgument(uint32_t n, uint32_t o) const {
    const Node& node = g_.node(n);
    const int i = node.op->UpdatedInput(static_cast<int>(o));
    return i >= 0 && plan_.storage_id[g_.EntryId(node.inputs[i])] == MemoryPlan::kExternal;
  }

  // Writes output o over input i when the op allows it, this node is the input's last reader,
  // no other entry holds the input's buffer (a view of it), and the two have the same size.
  bool TryInplace(uint32_t n, uint32_t o, uint32_t e) {
    const Node& node = g_.node(n);
    for (const auto& [i, out] : node.op->inplace) {
      if (out != static_cast<int>(o) || i >= static_cast<int>(node.inputs.size())) continue;
      const uint32_t in = g_.EntryId(node.inputs[i]);
      if (plan_.storage_id[in] < 0 || !owner_[in] || uses_[in] != 1 || Bytes(in) != Bytes(e) ||
          holders_[plan_.storage_id[in]] != 1)
        continue;
      plan_.storage_id[e] = plan_.storage_id[in];
      plan_.inplace[e] = true;
      owner_[in] = false;  // the buffer now belongs to the output
      return true;
    }
    return false;
  }

  // A reshape whose input other nodes read after it: its output is the input's buffer seen with
  // another shape (a view; the reshape copies nothing), held by both entries until the last of
  // their readers is done. No op writes in place over a buffer two entries hold (TryInplace).
  bool TryView(uint32_t n, uint32_t o, uint32_t e) {
    const Node& node = g_.node(n);
    if (node.op->pointwise.kind != PointwiseKind::kReshape || o != 0) return false;
    const uint32_t in = g_.EntryId(node.inputs[0]);
    const int id = plan_.storage_id[in];
    if (id < 0 || !owner_[in] || Bytes(in) != Bytes(e)) return false;
    plan_.storage_id[e] = id;
    plan_.inplace[e] = true;
    ++holders_[id];
    return true;
  }

  int TakeFree(size_t bytes) {
    auto it = free_.lower_bound(bytes);
    if (it == free_.end() || it->first > 2 * bytes) return -1;
    const int id = it->second;
    free_.erase(it);
    return id;
  }

  void Release(uint32_t e) {
    if (uses_[e] > 0 && --uses_[e] == 0) Free(e);
  }

  void Free(uint32_t e) {
    if (plan_.storage_id[e] < 0 || !owner_[e]) return;
    owner_[e] = false;
    const int id = plan_.storage_id[e];
    if (--holders_[id] == 0) free_.emplace(plan_.storage_bytes[id], id);
  }

  const Graph& g_;
  const std::vector<bool>& external_;
  const PlanOptions options_;
  // Per entry: readers of its values not yet planned. An input read for its shape or dtype only
  // (reshape_like's, _backward_Cast's second) keeps no buffer alive and blocks no in-place write:
  // the forward reshape writes over its input though its gradient reads that input's shape.
  std::vector<uint32_t> uses_;
  std::vector<bool> owner_;          // per entry: it (still) holds its buffer
  std::vector<int> holders_;         // per storage id: the entries that hold it (views: several)
  std::multimap<size_t, int> free_;  // bytes -> storage id, buffers nobody holds
  MemoryPlan plan_;
};

}  // namespace

Graph PlanMemory(const Graph& g, const std::vector<bool>& external, const PlanOptions& options) {
  WEFT_CHECK(g.has_types()) << "PlanMemory: run shape and type inference first";
  WEFT_CHECK_EQ(external.size(), g.num_entries()) << "PlanMemory: one 'external' flag per entry";
  return g.WithMemoryPlan(Planner(g, external, options).Run());
}

}  // namespace weft
