// Which nodes pointwise fusion may take (passes/fuse_pointwise.h), asked by the fusion pass and by
// rematerialization (passes/rematerialize.h) alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "graph/graph.h"

namespace weft {

// Whether the input at `pos` of a node of `kind` is read as data (a cast or reshape reads its
// later inputs for their dtype or shape only).
bool IsDataInput(PointwiseKind kind, size_t pos);

// The element count of node n's outputs when n can be a member of a fused group, else -1: a
// deterministic pointwise op on floating-point data whose outputs all have that count, and whose
// data inputs too (only a binary op's inputs may be smaller: broadcast). `g` is typed.
int64_t FusableSize(const Graph& g, uint32_t n);

}  // namespace weft
