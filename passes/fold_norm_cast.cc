#include "passes/fold_norm_cast.h"

#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"
#include "passes/infer.h"
#include "passes/internal/fold_pairs.h"

namespace weft {
namespace {

bool IsForwardOp(const Node& n, const char* op) {
  return n.op != nullptr && !n.is_backward() && n.op->name == op;
}

// Whether node `n` is a Cast of a LayerNorm's output.
bool CastOfNorm(const Graph& g, uint32_t n) {
  const Node& cast = g.node(n);
  if (!IsForwardOp(cast, "Cast")) return false;
  const NodeEntry y = cast.inputs[0];
  return IsForwardOp(g.node(y.node), "LayerNorm") && y.index == 0;
}

// The LayerNorm node Cast node `n` folds into, or -1: a LayerNorm of float32 data with no
// out_dtype yet, whose outputs nothing else reads (its mean and rstd: nothing, before the gradient
// pass), and a cast to a 16-bit float.
int64_t FoldableNorm(const Graph& g, const std::vector<DType>& dtypes, uint32_t n,
                     const std::vector<uint32_t>& readers) {
  if (!CastOfNorm(g, n)) return -1;
  const Node& cast = g.node(n);
  if (!Is16BitFloat(cast.attrs.Get<CastParam>().dtype)) return -1;
  const NodeEntry y = cast.inputs[0];
  const Node& norm = g.node(y.node);
  if (norm.attrs.Get<LayerNormParam>().out_dtype) return -1;
  if (dtypes[g.EntryId(norm.inputs[0])] != DType::kFloat32) return -1;
  for (uint32_t o = 0; o < g.num_outputs(y.node); ++o) {
    if (readers[g.EntryId({y.node, o})] != (o == 0 ? 1u : 0u)) return -1;
  }
  return y.node;
}

}  // namespace

bool ReadsNormThroughCast(const Graph& g) {
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (CastOfNorm(g, n)) return true;
  }
  return false;
}

Graph FoldNormCast(const Graph& g, const std::map<std::string, DType>& argument_dtypes,
                   int* folded) {
  if (folded != nullptr) *folded = 0;
  std::vector<DType> dtypes;
  try {
    dtypes = InferEntryTypes(g, argument_dtypes);
  } catch (const Error&) {
    return g;  // infer_shapes_and_types names the node and what it was given
  }
  return FoldPairs(
      g,
      [&](const Graph& graph, uint32_t n, const std::vector<uint32_t>& readers) {
        return FoldableNorm(graph, dtypes, n, readers);
      },
      [&](GraphRewrite& r, uint32_t norm, uint32_t cast) {
        const DType out = g.node(cast).attrs.Get<CastParam>().dtype;
        Node written = WithAttrs(g.node(norm), {{"out_dtype", std::string(DTypeName(out))}});
        for (NodeEntry& e : written.inputs) e = r.Map(e);
        const uint32_t now = r.AddLike(std::move(written), norm);
        r.MapNode(norm, now);
        return NodeEntry{now, 0};
      },
      folded);
}

}  // namespace weft
