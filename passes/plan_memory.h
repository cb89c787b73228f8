// Memory planning: gives every internal entry (not bound to a user array) a storage id, so that
// entries whose lifetimes do not overlap share a buffer, and an op that allows it writes its output
// over an input that nothing reads afterwards (in place). Entries are visited in node order; an
// entry's buffer goes back to the free list after its last reader of its values (an input read
// for its shape or dtype only, Op::ReadsInputValues, is not one); a new entry takes the smallest
// free buffer that fits (and is at most twice its size), else a new one. A reshape whose input is
// read after it is a view: its output shares the input's buffer, which goes back to the free list
// after the last reader of either, and which no op writes over in place while both hold it. An
// output that is an
// input the op updates (Op::UpdatedInput: write_at's) shares that input's buffer like any output
// in place; where the input is bound to a user array (an argument: a cache the graph keeps), the
// output stays kExternal with its `inplace` flag set, and the bound graph gives it the same array,
// with the reuse and in-place options on or off: that is what the output is, not a saving.
//
//   Graph g = PlanMemory(InferShapesAndTypes(...), external);
//   g.memory().total_bytes < g.memory().naive_bytes
#pragma once

#include <vector>

#include "graph/graph.h"

namespace weft {

struct PlanOptions {
  bool reuse = true;    // share buffers between entries whose lifetimes do not overlap
  bool inplace = true;  // run ops in place where they allow it
};

// `external[e]`: entry e is bound to a user array (arguments, head gradients, outputs).
// Needs the shapes and dtypes from InferShapesAndTypes.
Graph PlanMemory(const Graph& graph, const std::vector<bool>& external,
                 const PlanOptions& options = {});

}  // namespace weft
