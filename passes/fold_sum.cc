#include "passes/fold_sum.h"

#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "passes/fold_activation.h"
#include "passes/internal/fold_pairs.h"

namespace weft {
namespace {

// Whether entry e is a convolution's output that can take a sum: a bias, no epilogue, no sum,
// one reader.
bool CanTakeSum(const Graph& g, NodeEntry e, const std::vector<uint32_t>& readers) {
  const Node& conv = g.node(e.node);
  if (conv.op == nullptr || conv.op->name != "Convolution" || readers[g.EntryId(e)] != 1)
    return false;
  const ConvParam& p = conv.attrs.Get<ConvParam>();
  return !p.no_bias && !p.act && !p.with_sum;
}

// The input of `add` node n the convolution folds into (0 or 1), or -1: the other input has the
// output's shape and dtype (no broadcast).
int SumSide(const Graph& g, uint32_t n, const std::vector<uint32_t>& readers) {
  const Node& add = g.node(n);
  if (add.op == nullptr || add.op->name != "add" || add.inputs.size() != 2) return -1;
  const uint32_t out = g.EntryId({n, 0});
  for (int side = 0; side < 2; ++side) {
    const uint32_t conv = g.EntryId(add.inputs[side]), other = g.EntryId(add.inputs[1 - side]);
    if (!CanTakeSum(g, add.inputs[side], readers)) continue;
    if (g.shapes()[conv] == g.shapes()[out] && g.shapes()[other] == g.shapes()[out] &&
        g.dtypes()[conv] == g.dtypes()[other]) {
      return side;
    }
  }
  return -1;
}

}  // namespace

Graph FoldSum(const Graph& typed, int* folded) {
  WEFT_CHECK(typed.has_types()) << "FoldSum reads the shapes of a typed graph";
  const Graph summed = FoldPairs(
      typed,
      [](const Graph& g, uint32_t n, const std::vector<uint32_t>& readers) -> int64_t {
        const int side = SumSide(g, n, readers);
        if (side < 0) return -1;
        return g.node(n).inputs[side].node;
      },
      [&](GraphRewrite& r, uint32_t conv, uint32_t add) {
        const Node& node = typed.node(add);
        const int side = node.inputs[0].node == conv ? 0 : 1;
        Node with_sum = WithAttrs(typed.node(conv), {{"with_sum", "true"}});
        for (NodeEntry& e : with_sum.inputs) e = r.Map(e);
        with_sum.inputs.push_back(r.Map(node.inputs[1 - side]));
        with_sum.name = node.name;  // the sum's output keeps its name
        return NodeEntry{r.AddLike(std::move(with_sum), add), 0};
      },
      folded);
  return FoldActivation(summed);
}

}  // namespace weft
