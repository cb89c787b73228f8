// Folding BatchNorm into the convolution before it, for inference: what ONNX exporters and ONNX
// Runtime do. A BatchNorm over the channel axis (1) whose data is a Convolution's output read by
// nothing else becomes that convolution with a new weight and bias, computed from the arguments by
// per-channel nodes (so a trainer's Predict, whose parameters change between calls, stays right):
//
//   scale = gamma / sqrt(moving_var + eps)             (1 / sqrt(...) with fix_gamma)
//   weight' = weight * scale (per output channel)      bias' = (bias - moving_mean) * scale + beta
//
// with a relu after it for act_type relu. Outside training BatchNorm computes exactly this affine
// map, so the outputs agree within float32 rounding. Bind runs it (passes/pipeline.h,
// WEFT_FOLD_BATCH_NORM) only for graphs bound without gradients: a training forward needs the
// batch's statistics, which a folded graph no longer computes.
//
//   int folded = 0;
//   Graph g = FoldBatchNorm(graph, &folded);
#pragma once

#include "graph/graph.h"

namespace weft {

// The graph with every foldable BatchNorm folded; *folded (if not null) counts them.
Graph FoldBatchNorm(const Graph& graph, int* folded = nullptr);

}  // namespace weft
