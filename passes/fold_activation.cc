#include "passes/fold_activation.h"

#include <optional>
#include <string>
#include <vector>

#include "graph/rewrite.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "passes/internal/fold_pairs.h"

namespace weft {
namespace {

// The act_type node `n` applies, if it is a single activation a layer can take as its epilogue.
std::optional<ActType> ActivationOf(const Node& n) {
  if (n.op == nullptr) return std::nullopt;
  const std::string& op = n.op->name;
  if (op == "Activation") return n.attrs.Get<ActivationParam>().act_type;
  if (op == "gelu") {
    const bool tanh = n.attrs.Get<GeluParam>().approximate == GeluApproximate::kTanh;
    return tanh ? ActType::kGeluTanh : ActType::kGelu;
  }
#define WEFT_ACT_OP(value, name, functor) \
  if (op == name) return ActType::value;
  WEFT_ACTIVATIONS(WEFT_ACT_OP)
#undef WEFT_ACT_OP
  return std::nullopt;
}

// Whether `n` is a layer with no activation epilogue yet.
bool LayerWithoutActivation(const Node& n) {
  if (n.op == nullptr) return false;
  if (n.op->name == "FullyConnected") return !n.attrs.Get<FcParam>().act;
  if (n.op->name == "Convolution") return !n.attrs.Get<ConvParam>().act;
  return false;
}

// The layer node activation node `n` can fold into, or -1.
int64_t FoldableLayer(const Graph& g, uint32_t n, const std::vector<uint32_t>& readers) {
  const Node& act = g.node(n);
  if (!ActivationOf(act) || act.inputs.size() != 1) return -1;
  const NodeEntry data = act.inputs[0];
  if (!LayerWithoutActivation(g.node(data.node)) || readers[g.EntryId(data)] != 1) return -1;
  return data.node;
}

// The layer node `layer` with `act` as its epilogue.
Node WithActivation(const Node& layer, ActType act) {
  return WithAttrs(layer, {{"act_type", ActivationName(act)}});
}

}  // namespace

Graph FoldActivation(const Graph& g, int* folded) {
  return FoldPairs(
      g, FoldableLayer,
      [&](GraphRewrite& r, uint32_t layer, uint32_t act) {
        Node folded_layer = WithActivation(g.node(layer), *ActivationOf(g.node(act)));
        for (NodeEntry& e : folded_layer.inputs) e = r.Map(e);
        folded_layer.name = g.node(act).name;  // the activation's output keeps its name
        return NodeEntry{r.AddLike(std::move(folded_layer), act), 0};
      },
      folded);
}

}  // namespace weft
