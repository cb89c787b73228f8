// Folding a residual block's join into the convolution before it, for CPU inference: an `add` of
// a convolution's output (with a bias, no epilogue yet, read by nothing else) and another value
// of the same shape and dtype becomes the convolution with `with_sum` (ops/nn/convolution.cc):
// oneDNN adds the other value in the convolution's own pass (its sum post-op), over the value's
// buffer when this is its last reader, instead of a second pass over both. An activation read
// only after the sum then folds as the epilogue (fold_activation.h: act(conv + bias + sum), a
// ResNet block's relu). The outputs agree within float32 rounding.
//
// It runs on the typed graph (the shapes decide: a broadcast add keeps its op), after channels
// last (passes/channels_last.h: the add of two channels-last values is channels last too). Bind
// runs it (passes/pipeline.h, WEFT_FOLD_SUM) on CPU inference graphs: the GPU's convolution
// takes no sum.
//
//   int folded = 0;
//   Graph g = FoldSum(typed, &folded);
#pragma once

#include "graph/graph.h"

namespace weft {

// The typed graph with every foldable sum folded, then the activations after them; *folded (if
// not null) counts the sums.
Graph FoldSum(const Graph& typed, int* folded = nullptr);

}  // namespace weft
