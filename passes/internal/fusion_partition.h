// The partition step of pointwise fusion (passes/fuse_pointwise.h): which nodes become one fused
// node. A node joins the groups of its data inputs that fusion may take (passes/fusable.h), of its
// element count and phase, while the union stays convex as far as the groups that reach each node
// tell (at most kReachCap of them per node; past that it joins less). Visits each node once, in
// order: linear in the graph's size. The rewrite (fuse_pointwise.cc) still checks for cycles.
//
//   for (const std::vector<uint32_t>& members : FusionGroups(typed)) ...
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace weft {

// The groups of two or more nodes of `g` (typed), each in node order, in the order of their first
// node. A node is in at most one group.
std::vector<std::vector<uint32_t>> FusionGroups(const Graph& g);

}  // namespace weft
