// Strongly connected components of a directed graph given as successor lists: the sets of
// vertices that all reach one another. Tarjan's algorithm, iterative (a long chain does not
// overflow the stack), linear in vertices plus edges. The fusion pass uses it to find the groups
// that close a cycle (passes/fuse_pointwise.cc).
//
//   // 0 -> 1 -> 2 -> 0, 2 -> 3
//   auto components = StronglyConnectedComponents({{1}, {2}, {0, 3}, {}});
//   // {{3}, {2, 1, 0}}: every vertex in exactly one; a component before the ones that reach it
#pragma once

#include <cstdint>
#include <vector>

namespace weft {

// successors[v]: the vertices v has an edge to (repeats and self edges allowed). Returns every
// component once, in reverse topological order of the condensed graph (a component is listed
// before any component with an edge into it). Throws weft::Error for a successor that is not a
// vertex.
std::vector<std::vector<uint32_t>> StronglyConnectedComponents(
    const std::vector<std::vector<uint32_t>>& successors);

}  // namespace weft
