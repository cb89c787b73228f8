// Moving transposes across the layers that map rows, for inference. A FullyConnected over the
// last axis computes each row of its output from the same row of its input alone, so a transpose
// that keeps the last axis in place may as well run on the other side of the layer. An imported
// nn.MultiheadAttention with batch_first (PyTorch's export) transposes its input (B, T, E) to
// (T, B, E) before the packed projection and its result back after the output projection: each
// a copy of the activations, beside the copies that move the heads apart and back together.
// Moved across its layer, each transpose joins the movement chain on the layer's other side,
// which compose_moves (compose_moves.h) then reads as one copy:
//   - up: a transpose read only by a FullyConnected whose every reader is a movement op: the
//     layer reads the transpose's input, and the transpose the layer's output;
//   - down: a FullyConnected whose input a movement op makes, read only by a chain of reshapes
//     and transposes that keep rows whole (the last axis stays last, its extent unchanged), at
//     least one a transpose: the chain reads the layer's input (with the input's row length),
//     and the layer reads the chain.
// A layer computes the same rows either way: the outputs are the same values.
//
// It runs on the typed graph, before compose_moves, on inference binds (passes/pipeline.h,
// WEFT_COMMUTE_MOVES), and returns the graph untyped when it moved anything (the moved layers
// and transposes have new shapes: Bind infers them again), else the typed graph itself.
//
//   int moved = 0;
//   Graph g = CommuteMoves(typed, &moved);   // moved > 0: infer g's shapes again
#pragma once

#include "graph/graph.h"

namespace weft {

// `typed` with the transposes moved across the layers as above; *moved (if not null) counts the
// layers a transpose moved across.
Graph CommuteMoves(const Graph& typed, int* moved = nullptr);

}  // namespace weft
