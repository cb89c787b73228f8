#include "passes/pass_gradients_through.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/rewrite.h"
#include "ops/op.h"

namespace weft {
namespace {

// Whether node n is a `_backward_add` whose operands have its output gradient's shape and dtype,
// and neither of whose gradients is a graph output.
bool PassesThrough(const Graph& g, uint32_t n, const std::vector<bool>& output) {
  const Node& node = g.node(n);
  if (node.op == nullptr || node.op->name != "_backward_add") return false;
  const uint32_t dy = g.EntryId(node.inputs[0]);
  for (int i : {1, 2}) {
    const uint32_t x = g.EntryId(node.inputs[i]);
    if (g.shapes()[x] != g.shapes()[dy] || g.dtypes()[x] != g.dtypes()[dy]) return false;
  }
  return !output[g.EntryId({n, 0})] && !output[g.EntryId({n, 1})];
}

}  // namespace

Graph PassGradientsThrough(const Graph& g, int* dropped) {
  std::vector<bool> output(g.num_entries(), false);
  for (const NodeEntry& e : g.outputs()) output[g.EntryId(e)] = true;
  GraphRewrite r(g);
  int count = 0;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (!PassesThrough(g, n, output)) {
      r.Keep(n);
      continue;
    }
    const NodeEntry dy = r.Map(g.node(n).inputs[0]);
    r.MapEntry({n, 0}, dy);
    r.MapEntry({n, 1}, dy);
    ++count;
  }
  if (dropped != nullptr) *dropped = count;
  return std::move(r).Finish();
}

}  // namespace weft
