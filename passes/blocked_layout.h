// Blocked layout for a CPU training graph's convolutional network: its convolutions, poolings and
// BatchNorms, forward and backward, hand each other their images in oneDNN's nChw16c layout
// (layout "NCHW16c", ops/nn/window2d.h: the channels in blocks of 16, innermost), the layout
// oneDNN's direct and Winograd convolutions compute in, instead of NCHW, which every
// convolution reordered in and out (about a quarter of oneDNN's time in a ResNet training step on
// this machine's AVX-512: bench/README.md).
//
// The shapes stay NCHW: only where the values lie changes, so the graph keeps every node and
// entry, and the pass only sets `layout` on the nodes that take the blocked layout. An image is
// a 4-D float32 or bfloat16 entry that is no argument or output of the graph, whose channels are
// a multiple of 16 and whose plane has more than one position (BlockedImage: a (N, C, 1, 1) image
// is the same bytes either way). Images joined by layout-blind pointwise ops (relu, add, their
// gradients, the gradients' sums, casts; every data input of the same shape) form one component,
// blocked together or not at all. A component is blocked when every node that writes or reads
// its values is such a pointwise op or a window op or BatchNorm that can take the layout, and
// each such op is blocked when every image it reads or writes is: the largest such set, found by
// dropping what fails until nothing does. Any other reader (flatten, a graph output, a float64
// op) keeps its component in NCHW, and the ops around it with it.
//
// Bind runs it on CPU binds (passes/pipeline.h, WEFT_BLOCKED_LAYOUT), after the gradient is built
// and shapes are known, before fusion (whose groups are then blind to the layout too). An
// inference bind's windows are channels last by then (channels_last.h), which the pass leaves
// alone; with WEFT_CHANNELS_LAST=0 they are blocked instead (ResNet-18 at batch 32: 214 ms against
// channels last's 316, at batch 1 14.3 against 12.8; bench/README.md).
//
//   int blocked = 0;
//   Graph g = BlockedLayout(typed_graph, &blocked);
#pragma once

#include "graph/graph.h"

namespace weft {

// `typed` (after shape inference) with its convolutions, poolings and BatchNorms in the blocked
// layout where the rule above allows; *blocked (if not null) counts them.
Graph BlockedLayout(const Graph& typed, int* blocked = nullptr);

}  // namespace weft
