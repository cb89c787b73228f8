// Rematerialization for pointwise fusion (FusePointwise runs it before it partitions): a backward
// node that fusion may take, reading a value that forward pointwise ops computed from few
// full-size entries, reads instead a copy of those ops made in the backward phase. Fused into the
// backward group, the copy recomputes the value in registers (or in the CPU's tile) instead of
// reading it from memory, and the forward group no longer stores it: a training step of a chain
// of k pointwise ops then reads x and dy and writes dx, instead of storing k values forward and
// reading them back (what torch.compile's min-cut recomputation gets). The copies compute what the
// originals compute, bit for bit: the same ops on the same inputs.
//
// A value is recomputed when its cone (the forward nodes fusion may take, of its element count,
// that it is computed from through data inputs) has at most kRematCap nodes and reads at most
// kRematFullInputs full-size entries from outside itself. Each forward node is copied at most once
// and its copy shared by every backward reader, so the pass is linear in the graph's size.
//
//   size_t copies = 0;
//   Graph g = Rematerialize(typed, &copies);   // typed too; `typed` itself when nothing is copied
#pragma once

#include <cstddef>

#include "graph/graph.h"

namespace weft {

inline constexpr size_t kRematCap = 32;
inline constexpr size_t kRematFullInputs = 2;

Graph Rematerialize(const Graph& typed, size_t* copies = nullptr);

}  // namespace weft
