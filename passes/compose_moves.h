// Composing data movement, for inference: a chain of reshapes, transposes and slices copies its
// data once per transpose or slice, where one strided read of the chain's source would do. An
// imported transformer has such chains around every attention (PyTorch's export of
// nn.MultiheadAttention slices q, k and v out of the packed projection, reshapes each to
// (T, B*H, D) and transposes it to (B*H, T, D): two copies each, and a transpose of the whole
// projection before them). Each movement op reads its input as a strided view of the chain's
// first input (the root): the views compose as PyTorch's view rules do (a reshape composes where
// it only splits or merges axes that run evenly through the root), and the last op of a chain
// becomes one _strided_copy of the root (ops/tensor/shape.cc), or a reshape of it where the view
// is the whole root in order; the ops before it, read by nothing else, go.
//
// A chain is cut where composing would cost a copy: an op composes through the op before it only
// when every reader of that op's output is a movement op that composes too (a reshape of a value
// that is copied anyway stays a reshape of it), and only into a view whose innermost axis runs
// contiguously through the root (a strided read that moves rows; the tiled transpose kernels
// keep the reads that do not). The outputs are the same values, bit for bit.
//
// It runs on the typed graph (the shapes decide). Bind runs it (passes/pipeline.h,
// WEFT_COMPOSE_MOVES) on inference binds, on both devices: _strided_copy has no gradient.
//
//   int composed = 0;
//   Graph g = ComposeMoves(typed, &composed);
#pragma once

#include "graph/graph.h"

namespace weft {

// The typed graph with its movement chains composed; *composed (if not null) counts the ops that
// became a read of their chain's root.
Graph ComposeMoves(const Graph& typed, int* composed = nullptr);

}  // namespace weft
