// Stable nodes: a layer's parameters prepared from other parameters (an inference graph's
// weights), whose values change only when such an argument does. An op node is stable when it is
// a forward node, its op is deterministic and changes nothing but its outputs (no random draws,
// no mutated inputs, no host inputs), each input is an argument no node mutates or an op node of
// the same kind, and it feeds a layer's parameter inputs (by name: weight, bias, gamma, beta,
// moving_mean, moving_var, dw_weight, dw_bias, parameters) directly or through stable nodes; what
// lies on the data's path is never stable (a caller may refill its data array in place). BatchNorm
// folded into a convolution (fold_batch_norm.h) leaves such nodes: the weight scaled by gamma /
// sqrt(var + eps) and the shifted bias; a bfloat16 model's casts of its BatchNorms' gamma and beta
// are others.
//
// Inference binds (passes/pipeline.h; WEFT_KEEP_STABLE=0 turns it off) keep the stable entries
// that are not graph outputs in buffers of their own (the memory plan's external entries), and the
// executor pushes a stable node again only when the version of one of its inputs changed
// (executor/internal/graph_run.h): the folded weights, and on the CPU the layouts oneDNN keeps of
// them per version, are computed once.
//
//   std::vector<bool> stable = StableEntries(g);   // per entry
#pragma once

#include <vector>

#include "graph/graph.h"

namespace weft {

// Per node: whether it is stable.
std::vector<bool> StableNodes(const Graph& g);

// Per entry: whether a stable node makes it and it is not one of the graph's outputs.
std::vector<bool> StableEntries(const Graph& g);

}  // namespace weft
