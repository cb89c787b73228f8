#include "passes/channels_last.h"

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

bool IsWindowOp(const Node& n) {
  if (n.op == nullptr) return false;
  const std::string& op = n.op->name;
  if (op == "Convolution") return !n.attrs.Get<ConvParam>().window.channels_last;
  if (op == "Pooling") return !n.attrs.Get<PoolParam>().window.channels_last;
  return false;
}

// A BatchNorm over the channels (axis 1 of 4): of a channels-last value, over its last axis.
bool IsChannelNorm(const Node& n) {
  if (n.op == nullptr || n.op->name != "BatchNorm") return false;
  const int axis = n.attrs.Get<BatchNormParam>().axis;
  return axis == 1 || axis == -3;
}

// Whether node n computes each output element from the inputs' elements at the same index (or
// broadcast), so that permuting every data input's axes permutes its output the same way.
bool LayoutBlind(const Node& n) {
  if (n.op == nullptr || n.num_outputs() != 1) return false;
  switch (n.op->pointwise.kind) {
    case PointwiseKind::kUnary:
    case PointwiseKind::kCast:
      return n.inputs.size() == 1;
    case PointwiseKind::kBinary:
    case PointwiseKind::kTernary:
    case PointwiseKind::kAddN:
      return true;
    default:
      return false;
  }
}

class Converter {
 public:
  explicit Converter(const Graph& g)
      : g_(g), r_(g), last_(g.num_entries()), first_(g.num_entries()) {}

  Graph Run(int* converted) && {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) Convert(n);
    for (const NodeEntry& e : g_.outputs()) {
      if (last_[g_.EntryId(e)]) r_.MapEntry(e, First(e));
    }
    if (converted != nullptr) *converted = converted_;
    return std::move(r_).Finish();
  }

 private:
  bool IsLast(NodeEntry e) const { return last_[g_.EntryId(e)].has_value(); }

  void Convert(uint32_t n) {
    const Node& node = g_.node(n);
    if (IsWindowOp(node)) {
      ++converted_;
      return ReadingLast(n, "layout", "NHWC");
    }
    if (IsChannelNorm(node) && IsLast(node.inputs[0])) return ReadingLast(n, "axis", "3");
    if (LayoutBlind(node) && !node.inputs.empty() && AllLast(node.inputs)) return Blind(n);
    std::vector<NodeEntry> inputs;
    for (const NodeEntry& e : node.inputs) inputs.push_back(IsLast(e) ? First(e) : r_.Map(e));
    r_.Keep(n, std::move(inputs));
  }

  bool AllLast(const std::vector<NodeEntry>& entries) const {
    for (const NodeEntry& e : entries) {
      if (!IsLast(e)) return false;
    }
    return true;
  }

  // Node n reading its data (input 0) channels last, with attribute `key` set to `value` (a window
  // op's layout, a BatchNorm's axis): its output 0 is channels last, its others (a BatchNorm's
  // per-channel ones) as they were.
  void ReadingLast(uint32_t n, const char* key, const char* value) {
    Node node = WithAttrs(g_.node(n), {{key, value}});
    node.inputs[0] = Last(node.inputs[0]);
    for (size_t i = 1; i < node.inputs.size(); ++i) node.inputs[i] = r_.Map(node.inputs[i]);
    node.name += "_nhwc";
    const uint32_t now = r_.Add(std::move(node), {});
    last_[g_.EntryId({n, 0})] = NodeEntry{now, 0};
    for (uint32_t o = 1; o < g_.num_outputs(n); ++o) r_.MapEntry({n, o}, {now, o});
  }

  // A layout-blind op over channels-last values: channels last too.
  void Blind(uint32_t n) {
    Node node = g_.node(n);
    for (NodeEntry& e : node.inputs) e = *last_[g_.EntryId(e)];
    node.name += "_nhwc";
    last_[g_.EntryId({n, 0})] = NodeEntry{r_.Add(std::move(node), {}), 0};
  }

  // Old entry e, channels last: as converted, or transposed from NCHW once.
  NodeEntry Last(NodeEntry e) {
    std::optional<NodeEntry>& last = last_[g_.EntryId(e)];
    if (!last) last = Transpose(r_.Map(e), "(0, 2, 3, 1)", g_.node(e.node).name + "_to_nhwc");
    return *last;
  }

  // Old entry e (channels last in the new graph), in NCHW: transposed back once, under the old
  // node's name (an output keeps its name).
  NodeEntry First(NodeEntry e) {
    std::optional<NodeEntry>& first = first_[g_.EntryId(e)];
    if (!first) first = Transpose(*last_[g_.EntryId(e)], "(0, 3, 1, 2)", g_.node(e.node).name);
    return *first;
  }

  NodeEntry Transpose(NodeEntry from, const char* axes, const std::string& name) {
    Node t;
    t.op = &GetOp("transpose");
    t.name = name;
    t.attrs = ParseAttrs(*t.op, {{"axes", axes}});
    t.inputs = {from};
    return {r_.Add(std::move(t), {}), 0};
  }

  const Graph& g_;
  GraphRewrite r_;
  std::vector<std::optional<NodeEntry>> last_;   // per old entry: its channels-last new entry
  std::vector<std::optional<NodeEntry>> first_;  // per old entry: a transpose of last_ back
  int converted_ = 0;
};

}  // namespace

Graph ChannelsLast(const Graph& graph, int* converted) {
  WEFT_CHECK(!graph.has_types()) << "ChannelsLast runs before shape inference";
  return Converter(graph).Run(converted);
}

}  // namespace weft
