// Common subexpression elimination: nodes with the same op, the same attributes and the same
// inputs compute the same thing, so all but the first are dropped and their users read the
// first. Inputs are compared after merging, so a whole repeated chain collapses in one sweep;
// the pass repeats until nothing changes.
//
// Random and stateful ops, and ops that mutate an input (optimizer updates), are never merged: two
// Dropouts draw two masks, two identical updates update twice. A node that reads an entry after
// such an op mutated it is not merged with one that read it before. Ops that ask for
// temporary workspace are merged like any other: whether an op asks for workspace depends on how
// a device library implements it, and CSE's result must not (MXNet refused such ops, so the same
// model was merged in one build and not in another: seeds/runtime-fusion-regression-issue.txt).
#pragma once

#include "graph/graph.h"

namespace weft {

Graph EliminateCommonExpr(const Graph& graph);

}  // namespace weft
