// What the passes that move data movement around (compose_moves.h, commute_moves.h,
// fold_attention_moves.h) share: which ops are movement ops (reshapes, which only rename the
// extents of their input; transpose; slice: each with one output and its data as input 0), and
// views of a tensor's elements as runs of positions (a strided walk, CuTe's layouts, small).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/shape.h"
#include "graph/graph.h"

namespace weft {

// reshape, reshape_dims, expand_dims, flatten, reshape_like.
bool IsReshape(const Node& n);
// A reshape, a transpose or a slice.
bool IsMove(const Node& n);

// One run of a view's walk: `extent` positions, `stride` elements of the root apart.
struct Run {
  int64_t extent, stride;
  bool operator==(const Run&) const = default;
};
using Runs = std::vector<Run>;  // outermost first

// `runs` without runs of one position, neighbours that run evenly into each other merged.
Runs Normalized(const Runs& runs);

// The walk cut into the axes of `to`, innermost first, a run split where an axis takes part of
// it; nullopt where an axis would take part of a run it does not divide.
std::optional<std::vector<Runs>> Regrouped(Runs walk, const Shape& to);

}  // namespace weft
