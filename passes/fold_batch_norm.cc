#include "passes/fold_batch_norm.h"

#include <sstream>
#include <string>
#include <vector>

#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "passes/internal/fold_pairs.h"

namespace weft {
namespace {

// The Convolution node BatchNorm node `n` can fold into, or -1.
int64_t FoldableConvolution(const Graph& g, uint32_t n, const std::vector<uint32_t>& readers) {
  const Node& bn = g.node(n);
  if (bn.op == nullptr || bn.op->name != "BatchNorm") return -1;
  const NodeEntry data = bn.inputs[0];
  const Node& conv = g.node(data.node);
  if (conv.op == nullptr || conv.op->name != "Convolution" || readers[g.EntryId(data)] != 1)
    return -1;
  // over the convolution's channel axis: 1, or the last of 4 with layout NHWC
  const int axis = bn.attrs.Get<BatchNormParam>().axis;
  const bool channels_last = conv.attrs.Get<ConvParam>().window.channels_last;
  if (channels_last ? (axis != 3 && axis != -1) : axis != 1) return -1;
  return data.node;
}

std::string Text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

// Appends the nodes of one fold to a rewrite: each a forward node named after the BatchNorm.
class Folder {
 public:
  Folder(GraphRewrite& r, const std::string& name) : r_(r), name_(name) {}

  NodeEntry Op(const char* op, std::vector<NodeEntry> inputs, AttrMap attrs = {}) {
    Node node;
    node.op = &GetOp(op);
    node.name = name_ + "_fold" + std::to_string(count_++);
    node.attrs = ParseAttrs(*node.op, attrs);
    node.inputs = std::move(inputs);
    return {r_.Add(std::move(node), {}), 0};
  }

 private:
  GraphRewrite& r_;
  const std::string& name_;
  int count_ = 0;
};

// The folded convolution for BatchNorm `bn` over Convolution `conv`; returns its output (after the
// relu of act_type relu).
NodeEntry Fold(GraphRewrite& r, const Node& conv, const Node& bn) {
  const BatchNormParam& p = bn.attrs.Get<BatchNormParam>();
  const ConvParam& c = conv.attrs.Get<ConvParam>();
  Folder f(r, bn.name);
  const auto in = [&](const Node& node, int i) { return r.Map(node.inputs[i]); };
  const NodeEntry inv_std = f.Op(
      "rdiv_scalar", {f.Op("sqrt", {f.Op("add_scalar", {in(bn, 4)}, {{"scalar", Text(p.eps)}})})},
      {{"scalar", "1"}});
  const NodeEntry scale = p.fix_gamma ? inv_std : f.Op("mul", {in(bn, 1), inv_std});
  const NodeEntry weight =
      f.Op("mul", {in(conv, 1), f.Op("reshape", {scale}, {{"shape", "(-1, 1, 1, 1)"}})});
  const NodeEntry centred =
      c.no_bias ? f.Op("neg", {in(bn, 3)}) : f.Op("sub", {in(conv, 2), in(bn, 3)});
  const NodeEntry bias = f.Op("add", {f.Op("mul", {centred, scale}), in(bn, 2)});
  Node folded = WithAttrs(conv, {{"no_bias", "false"}});
  folded.inputs = {in(conv, 0), weight, bias};
  NodeEntry out{r.Add(std::move(folded), {}), 0};
  return p.act == BnAct::kRelu ? f.Op("relu", {out}) : out;
}

}  // namespace

Graph FoldBatchNorm(const Graph& g, int* folded) {
  return FoldPairs(
      g, FoldableConvolution,
      [&](GraphRewrite& r, uint32_t conv, uint32_t bn) {
        return Fold(r, g.node(conv), g.node(bn));
      },
      folded);
}

}  // namespace weft
