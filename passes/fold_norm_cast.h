// Folding a Cast into the LayerNorm before it: a LayerNorm of float32 data whose output only a
// Cast to bfloat16 or float16 reads writes that dtype itself (its out_dtype), computed in float32
// and rounded once as the Cast rounded it, and the Cast goes. The mixed-precision pass makes these
// pairs (passes/mixed_precision.h: a LayerNorm's output in float32, cast for the 16-bit matrix
// products after it): folded, the normalized activations are written and read once, in 16 bits,
// and the gradient pass then gives the LayerNorm's backward its out_grad in 16 bits too, so no
// _backward_Cast widens it first. Outputs equal the unfolded graph's bit for bit where the backend
// rounds as its Cast does (the CPU's and the GPU's kernels both round with their Cast's
// conversion; LayerNorm.OutDtype* checks it). Bind runs it (passes/pipeline.h,
// WEFT_FOLD_NORM_CAST) before the gradient pass, on every bind where a Cast reads a LayerNorm.
//
//   int folded = 0;
//   Graph g = FoldNormCast(graph, /*argument_dtypes=*/{}, &folded);
#pragma once

#include <map>
#include <string>

#include "core/dtype.h"
#include "graph/graph.h"

namespace weft {

// Whether a Cast reads a LayerNorm's output in `graph` (the pass has something to look at).
bool ReadsNormThroughCast(const Graph& graph);

// The graph with every foldable pair folded; arguments typed as `argument_dtypes` says (float32
// if missing; a graph whose types do not infer is returned as it is, for the inference pass to
// report); *folded (if not null) counts the pairs.
Graph FoldNormCast(const Graph& graph, const std::map<std::string, DType>& argument_dtypes,
                   int* folded = nullptr);

}  // namespace weft
