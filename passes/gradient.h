// The gradient pass: appends the backward graph to a forward graph.
//
// For each forward output i a variable "<output>_head_grad" carries the gradient flowing into it
// (Graph::head_grads()). Walking the forward nodes from last to first, each node that lies between
// a requested argument and an output runs its op's gradient rule (ops/op.h), whose backward nodes
// are added with forward_node set. An entry read by several nodes gets the sum of their
// gradients through one add_n; an output that receives none gets zeros_like. The gradient of each
// argument in `wrt` becomes a graph output, after the forward outputs, in `wrt` order. Nodes that
// no requested gradient needs are pruned, so a null gradient request costs no work.
//
//   Graph g = Gradient(forward, {weight_node, bias_node});
//   g.outputs()[g.num_forward_outputs() + 0] is d(sum of outputs . head grads)/d(weight)
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace weft {

Graph Gradient(const Graph& forward, const std::vector<uint32_t>& wrt);

}  // namespace weft
