// What the folding passes (fold_batch_norm.h, fold_activation.h) share: each finds pairs of a
// node and the node before it, whose only reader it is, and replaces the pair by new nodes.
//
//   Graph out = FoldPairs(g, FoldableConvolution, [&](GraphRewrite& r, uint32_t before,
//                                                     uint32_t node) { return ...; }, &count);
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "graph/graph.h"
#include "graph/rewrite.h"

namespace weft {

// The node that node `n` folds with (an earlier node it reads), or -1; `readers` counts each
// entry's readers (Graph::EntryUseCounts).
using FoldPartnerFn =
    std::function<int64_t(const Graph& g, uint32_t n, const std::vector<uint32_t>& readers)>;
// Appends the nodes replacing the pair (`before`, `node`) to `r`; returns what node's output 0
// becomes. The first node it appends stands for `node` (forward nodes, head gradients).
using FoldFn = std::function<NodeEntry(GraphRewrite& r, uint32_t before, uint32_t node)>;

// `g` with every pair `partner` finds folded by `fold`; *folded (if not null) counts the pairs.
Graph FoldPairs(const Graph& g, const FoldPartnerFn& partner, const FoldFn& fold, int* folded);

}  // namespace weft
