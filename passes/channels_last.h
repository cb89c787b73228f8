// Channels last for a CPU inference graph: its convolutions and poolings run with layout NHWC
// (ops/nn/window2d.h), on data that stays channels last between them. oneDNN's channels-last
// kernels read and write the tensors where they lie, while NCHW data is reordered into a blocked
// layout and back around every convolution (ops/cpu/convolution.cc): on mobilenet_v2's layers,
// three times the convolutions' time (bench/README.md).
//
// A Convolution or Pooling (layout NCHW) becomes its NHWC form, reading its data channels last: a
// value already channels last, or a transpose (0, 2, 3, 1) of it, made once per value. An op that
// does not care where the channels are keeps its inputs' layout: a unary pointwise op or cast of
// a channels-last value, and a binary, ternary or add_n pointwise op whose data inputs are all
// channels last (permuting both operands of a broadcast the same way permutes its result), and a
// BatchNorm over the channels (axis 1) of a channels-last value, which then normalizes over its
// last axis (a BatchNorm that did not fold: after a sum, or with folding off). Every
// other reader of a channels-last value, and every graph output, reads its transpose back
// (0, 3, 1, 2), made once per value. The outputs are the graph's outputs within float32 rounding.
//
// Bind runs it (passes/pipeline.h, WEFT_CHANNELS_LAST) on CPU inference graphs, after the folds
// (a BatchNorm folds into an NCHW convolution first), and on GPU graphs that compute in 16 bits,
// training ones too (before the gradient pass, which then differentiates the NHWC ops and the
// transposes; WEFT_GPU_CHANNELS_LAST=0 leaves them NCHW): cuDNN's tensor-core convolutions
// compute channels last, and NCHW bfloat16 data is transposed inside cuDNN around every one. A
// ResNet-50 bfloat16 training step takes 35 ms so against 55 NCHW (bench/README.md).
//
//   int converted = 0;
//   Graph g = ChannelsLast(graph, &converted);   // an untyped graph
#pragma once

#include "graph/graph.h"

namespace weft {

// The graph with its convolutions and poolings channels last; *converted (if not null) counts
// them. `graph` is untyped (before shape inference).
Graph ChannelsLast(const Graph& graph, int* converted = nullptr);

}  // namespace weft
