// Attention reading its operands where they lie, for inference. After compose_moves
// (compose_moves.h) an imported transformer's attention reads q, k and v through one strided copy
// each of the packed projection, and one more copy moves its result into the rows the output
// projection reads: four copies of the activations per layer. The Attention op reads any rows
// (ops/nn/attention.h, layout "rows": an offset and the strides of b, h and t for each of q, k, v
// and out, D contiguous), so those copies need not be made: an Attention whose operands are
// strided copies read only by it reads the copies' sources instead, and one whose result only a
// strided copy reads, a copy that moves whole rows and reads every element once, writes where
// that copy would have put each row.
//
// The heads (B, H) of every part are cut the same way: a part that merges them (the import's
// (1, B*H) of a 3-axis product) takes the other parts' cut, and a mask over merged heads is
// reshaped to it. Where a part's rows cannot be said so (D not contiguous, a T axis of several
// runs, heads cut three ways), it keeps its copy. The outputs are the same values.
//
// It runs on the typed graph after compose_moves, on inference binds (passes/pipeline.h,
// WEFT_FOLD_ATTENTION_MOVES), and returns the graph untyped when it folded anything (the
// Attention's log-sum-exp may take another shape of the heads: Bind infers the shapes again),
// else the typed graph itself.
//
//   int folded = 0;
//   Graph g = FoldAttentionMoves(typed, &folded);   // copies no longer made
#pragma once

#include "graph/graph.h"

namespace weft {

// `typed` with each Attention reading and writing through the copies around it where it can;
// *folded (if not null) counts the copies no longer made.
Graph FoldAttentionMoves(const Graph& typed, int* folded = nullptr);

}  // namespace weft
