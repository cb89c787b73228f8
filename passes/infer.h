// Shape and type inference over a whole graph, forward and backward: arguments take the shapes
// and dtypes given by name; head-gradient variables take their output's; every node's outputs
// come from its op's inference. Errors name the node, its op and the shapes it was given.
//
//   Graph g = InferShapesAndTypes(graph, {{"data", Shape{128, 64}}, ...}, {{"data",
//   DType::kFloat32}}); g.shapes()[g.EntryId({n, 0})]
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"

namespace weft {

// Arguments missing from `dtypes` are float32. An argument missing from `shapes` takes the shape
// its reader's op derives for it (a layer's weight and bias from its data); otherwise the error
// names the argument and the node. With `device`, the shapes of a graph bound to that device
// (outputs an op sizes per device: Op::device_shape); without, the device-neutral ones.
Graph InferShapesAndTypes(const Graph& graph, const std::map<std::string, Shape>& shapes,
                          const std::map<std::string, DType>& dtypes = {},
                          std::optional<DeviceType> device = std::nullopt);

// Every entry's dtype (Graph::EntryId order) without shapes, for passes that run before shapes are
// known: arguments as `dtypes` says (float32 if missing), head-gradient variables their output's,
// op outputs from their ops' type inference.
std::vector<DType> InferEntryTypes(const Graph& graph, const std::map<std::string, DType>& dtypes);

// Every argument's shape, from the shapes given (typically just the data's); dtypes as above.
std::map<std::string, Shape> InferArgumentShapes(const Graph& graph,
                                                 const std::map<std::string, Shape>& shapes,
                                                 const std::map<std::string, DType>& dtypes = {});

}  // namespace weft
