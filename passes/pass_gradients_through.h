// Dropping the gradient nodes that change nothing, for training binds: a `_backward_add` whose
// output gradient and both operands have one shape and dtype (nothing was broadcast) gives that
// gradient unchanged to both operands. It reads its operands for their shapes only, but a reader
// is a reader to the memory plan: every residual add kept its operands (a block's BatchNorm
// output) alive until the backward reached it, 45 MB of a Fashion-MNIST ResNet's step at batch
// 128. The pass drops such nodes and their readers read the output gradient itself; a node whose
// gradient is a graph output (bound to a caller's array) stays.
//
// It runs on the typed graph, after inference (the shapes decide). Bind runs it on graphs with a
// gradient (passes/pipeline.h, WEFT_PASS_GRADIENTS_THROUGH).
//
//   int dropped = 0;
//   Graph g = PassGradientsThrough(typed, &dropped);
#pragma once

#include "graph/graph.h"

namespace weft {

// `g` (typed) without the `_backward_add` nodes that pass their gradient through; *dropped (if
// not null) counts them.
Graph PassGradientsThrough(const Graph& g, int* dropped);

}  // namespace weft
