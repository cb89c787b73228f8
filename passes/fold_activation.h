// Folding an activation into the layer before it, for inference: the activation becomes the
// layer's epilogue (FullyConnected's and Convolution's act_type), applied in the layer's own call
// (oneDNN's post-op on the CPU, cuBLASLt's epilogue for FullyConnected on the GPU) instead of a
// second pass over the output. An activation op (relu, sigmoid, tanh, softrelu, gelu in either
// form, gelu_tanh, Activation) whose input is the output of a FullyConnected or Convolution
// without one, read by nothing else, folds (after fold_batch_norm, a folded BatchNorm's relu
// too); the outputs agree within float32 rounding (oneDNN's activations are its own code).
// Bind runs it (passes/pipeline.h, WEFT_FOLD_ACTIVATION) only for graphs bound without
// gradients: a training graph keeps the activation as an op, whose input its gradient reads.
//
//   int folded = 0;
//   Graph g = FoldActivation(graph, &folded);
#pragma once

#include "graph/graph.h"

namespace weft {

// The graph with every foldable activation folded; *folded (if not null) counts them.
Graph FoldActivation(const Graph& graph, int* folded = nullptr);

}  // namespace weft
