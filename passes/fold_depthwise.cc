#include "passes/fold_depthwise.h"

#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"
#include "passes/internal/fold_pairs.h"

namespace weft {
namespace {

// The convolution's parameters when node n is a float32 channels-last Convolution with a bias
// and no sum, else null.
const ConvParam* PlainConvolution(const Graph& g, uint32_t n) {
  const Node& node = g.node(n);
  if (node.op == nullptr || node.op->name != "Convolution") return nullptr;
  if (g.dtypes()[g.EntryId({n, 0})] != DType::kFloat32) return nullptr;
  const ConvParam& p = node.attrs.Get<ConvParam>();
  const Window2d& w = p.window;
  if (!w.channels_last || p.no_bias || p.with_sum || w.dilate[0] != 1 || w.dilate[1] != 1)
    return nullptr;
  return &p;
}

bool IsPointwiseExpansion(const ConvParam& p) {
  const Window2d& w = p.window;
  return p.num_group == 1 && w.kernel[0] == 1 && w.kernel[1] == 1 && w.stride[0] == 1 &&
         w.stride[1] == 1 && w.pad[0] == 0 && w.pad[1] == 0;
}

// 3x3, padding 1, stride 1 or 2 (both axes alike), a group per channel of `channels`.
bool IsDepthwise3x3(const ConvParam& p, int64_t channels) {
  const Window2d& w = p.window;
  return p.num_group == channels && p.num_filter == channels && w.kernel[0] == 3 &&
         w.kernel[1] == 3 && w.pad[0] == 1 && w.pad[1] == 1 && w.stride[0] == w.stride[1] &&
         (w.stride[0] == 1 || w.stride[0] == 2);
}

// The 1x1 convolution depthwise convolution n folds with, or -1.
int64_t Partner(const Graph& g, uint32_t n, const std::vector<uint32_t>& readers) {
  const ConvParam* depthwise = PlainConvolution(g, n);
  if (depthwise == nullptr) return -1;
  const NodeEntry in = g.node(n).inputs[0];
  const ConvParam* conv = PlainConvolution(g, in.node);
  if (conv == nullptr || readers[g.EntryId(in)] != 1 || !IsPointwiseExpansion(*conv) ||
      !IsDepthwise3x3(*depthwise, conv->num_filter)) {
    return -1;
  }
  return in.node;
}

}  // namespace

Graph FoldDepthwise(const Graph& typed, int* folded) {
  WEFT_CHECK(typed.has_types()) << "FoldDepthwise reads the dtypes of a typed graph";
  return FoldPairs(
      typed, Partner,
      [&](GraphRewrite& r, uint32_t conv, uint32_t depthwise) {
        const Node &a = typed.node(conv), &b = typed.node(depthwise);
        Node fused;
        fused.op = &GetOp("_conv_depthwise");
        fused.attrs = ConvDepthwiseAttrs({a.attrs.Get<ConvParam>(), b.attrs.Get<ConvParam>()});
        fused.name = b.name;  // the depthwise convolution's output keeps its name
        fused.inputs = {r.Map(a.inputs[0]), r.Map(a.inputs[1]), r.Map(a.inputs[2]),
                        r.Map(b.inputs[1]), r.Map(b.inputs[2])};
        return NodeEntry{r.AddLike(std::move(fused), depthwise), 0};
      },
      folded);
}

}  // namespace weft
