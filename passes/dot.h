// A graph as the passes left it, as Graphviz DOT (Executor::ToDot draws the bound graph and the
// graph after each pass of the bind pipeline with it; Taskflow's dump() is the model):
// one box per node (an ellipse per argument), an edge per value read, and one plain node per
// graph output. A fused node (`_fused_pointwise`) is a cluster of its steps, the unfused ops,
// with its inputs and outputs drawn to the steps that read and compute them. With a memory plan,
// each edge says which buffer its value got ("buf 3", "in place", or "user array": arguments,
// gradients and outputs), and its tooltip "entry 12: buf 3" names the graph's entry. Segments
// (consecutive nodes one engine op runs) are dashed clusters around their nodes. `title` and the
// device head the picture.
//
//   std::ofstream("step.dot") << GraphToDot(graph, device, "train step", segments);
//   // dot -Tsvg step.dot -o step.svg
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"

namespace weft {

struct DotSegment {
  std::vector<uint32_t> nodes;  // graph nodes, in order
  bool backward = false;
};

std::string GraphToDot(const Graph& graph, Device device, const std::string& title,
                       const std::vector<DotSegment>& segments = {});

}  // namespace weft
