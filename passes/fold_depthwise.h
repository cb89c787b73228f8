// Folding MobileNet's expansion into its depthwise filter, for CPU inference: a 1x1 convolution
// (layout NHWC, a bias, stride 1, no padding, one group, no sum) whose output only a 3x3
// depthwise convolution reads (layout NHWC, a bias, a group per channel, stride 1 or 2, padding
// 1, no dilation, no sum), both float32, becomes one _conv_depthwise (ops/nn/conv_depthwise.cc):
// oneDNN filters each tile of the expansion while it is in cache, so the block's widest tensor is
// never written out and read back. Each convolution keeps its epilogue (fold_activation.h), the
// depthwise one's output its name. The outputs agree within float32 rounding.
//
// It runs on the typed graph (dtypes and shapes decide), after channels last
// (passes/channels_last.h) and fold_sum (passes/fold_sum.h). Bind runs it (passes/pipeline.h,
// WEFT_FOLD_DEPTHWISE) on CPU inference graphs.
//
//   int folded = 0;
//   Graph g = FoldDepthwise(typed, &folded);
#pragma once

#include "graph/graph.h"

namespace weft {

// The typed graph with every foldable pair folded; *folded (if not null) counts them.
Graph FoldDepthwise(const Graph& typed, int* folded = nullptr);

}  // namespace weft
