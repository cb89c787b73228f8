#include "passes/internal/fold_pairs.h"

namespace weft {

Graph FoldPairs(const Graph& g, const FoldPartnerFn& partner, const FoldFn& fold, int* folded) {
  const std::vector<uint32_t> readers = g.EntryUseCounts();
  std::vector<int64_t> before(g.nodes().size(), -1);    // per folding node: its partner
  std::vector<bool> deferred(g.nodes().size(), false);  // partners folded at their reader
  int count = 0;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    before[n] = partner(g, n, readers);
    if (before[n] >= 0) {
      deferred[before[n]] = true;
      ++count;
    }
  }
  if (folded != nullptr) *folded = count;
  if (count == 0) return g;
  GraphRewrite r(g);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (deferred[n]) continue;
    if (before[n] < 0) {
      r.Keep(n);
      continue;
    }
    const uint32_t node = r.num_nodes();
    const NodeEntry out = fold(r, static_cast<uint32_t>(before[n]), n);
    r.MapNode(n, node);
    r.MapEntry({n, 0}, out);
  }
  return std::move(r).Finish();
}

}  // namespace weft
