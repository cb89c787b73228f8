// What the passes that move data movement around (compose_moves.h, commute_moves.h) call a
// movement op: reshapes (every op that only renames the extents of its input), transpose and
// slice, each with one output and its data as input 0.
#pragma once

#include "graph/graph.h"

namespace weft {

// reshape, reshape_dims, expand_dims, flatten, reshape_like.
bool IsReshape(const Node& n);
// A reshape, a transpose or a slice.
bool IsMove(const Node& n);

}  // namespace weft
