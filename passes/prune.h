// Dead-code elimination: drops every node no graph output depends on. Variables (the graph's
// arguments) always stay, so binding by name is unaffected.
#pragma once

#include "graph/graph.h"

namespace weft {

Graph Prune(const Graph& graph);

}  // namespace weft
