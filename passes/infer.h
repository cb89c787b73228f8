// Shape and type inference over a whole graph, forward and backward: arguments take the shapes
// and dtypes given by name; head-gradient variables take their output's; every node's outputs
// come from its op's inference. Errors name the node, its op and the shapes it was given.
//
//   Graph g = InferShapesAndTypes(graph, {{"data", Shape{128, 64}}, ...}, {{"data", DType::kFloat32}});
//   (*g.shapes)[g.EntryId({n, 0})]
#pragma once

#include <map>
#include <string>

#include "graph/graph.h"

namespace weft {

// Arguments missing from `dtypes` are float32. An argument missing from `shapes` is an error that
// names it, unless its shape follows from an op that constrains it (not supported yet: all are
// required).
Graph InferShapesAndTypes(Graph graph, const std::map<std::string, Shape>& shapes,
                          const std::map<std::string, DType>& dtypes = {});

}  // namespace weft
