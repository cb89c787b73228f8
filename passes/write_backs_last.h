// Write-backs last: the nodes of a graph's outputs from `first` on (an executor's write-backs:
// optimizer updates whose outputs are written into the arguments they update, executor.h's
// GraphExtension) moved after every other node, in their order. Nothing reads their outputs, so
// the order stays topological, and every other reader of the arguments they write runs before
// them: fusion orders nodes by readiness, which could put an update before a reader of the old
// weight. Bind runs it after fusion (passes/pipeline.h).
//
//   Graph g = WriteBacksLast(typed, typed.outputs().size() - write_back.size());
#pragma once

#include <cstddef>

#include "graph/graph.h"

namespace weft {

// Throws weft::Error naming the node when a node reads one of the outputs moved.
Graph WriteBacksLast(const Graph& graph, size_t first);

}  // namespace weft
