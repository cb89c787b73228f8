// Folding the gradient's casts into the layer that makes the gradient: in a mixed-precision step
// (passes/mixed_precision.h) a FullyConnected reads a 16-bit copy of each float32 master weight
// and bias, so the gradient pass gives its backward 16-bit d_weight and d_bias, each widened to
// the master's float32 by a _backward_Cast. Where those casts are all that read them, the backward
// writes float32 itself (param_grad_dtype: cuBLAS's and oneDNN's float32 outputs over 16-bit
// operands, the sums rounded once into float32, not into 16 bits and then widened), and the casts
// go: one pass over each gradient less, and gradients a bfloat16 rounding more exact. Runs on the
// typed graph (the casts' dtypes); Bind runs it (passes/pipeline.h, WEFT_FOLD_GRAD_CAST) when a
// gradient is requested.
//
//   int folded = 0;
//   Graph g = FoldGradCast(typed_graph, &folded);
#pragma once

#include "graph/graph.h"

namespace weft {

// The typed graph with every foldable _backward_FullyConnected's parameter gradients written in
// float32; *folded (if not null) counts the backward nodes.
Graph FoldGradCast(const Graph& graph, int* folded = nullptr);

}  // namespace weft
