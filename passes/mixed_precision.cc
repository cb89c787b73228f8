#include "passes/mixed_precision.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "graph/rewrite.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

// The dtype input `i` of an op with precision `p` computes in, given its floating inputs' dtypes.
DType Wanted(OpPrecision p, size_t i, DType now, DType low, DType widest) {
  switch (p) {
    case OpPrecision::kLow:
      return low;
    case OpPrecision::kFloat32:
      return Is16BitFloat(now) ? DType::kFloat32 : now;
    case OpPrecision::kData:
      return i == 0 || !Is16BitFloat(now) ? now : DType::kFloat32;
    case OpPrecision::kWidest:
      return widest;
    case OpPrecision::kKeep:
      return now;
  }
  return now;
}

// Copies the graph, inserting the casts (one per entry and dtype), and tracks each new node's
// output dtypes and name.
class Mixer {
 public:
  Mixer(const Graph& g, const PrecisionPolicy& policy) : g_(g), policy_(policy), r_(g) {}

  void Variable(uint32_t n, DType dtype) { Record(r_.Keep(n), g_.node(n).name, {dtype}); }

  void Op(uint32_t n) {
    const Node& node = g_.node(n);
    std::vector<NodeEntry> inputs;
    std::vector<DType> dtypes;
    std::optional<DType> widest;
    for (const NodeEntry& e : node.inputs) {
      inputs.push_back(r_.Map(e));
      dtypes.push_back(TypeOf(inputs.back()));
      const DType t = dtypes.back();
      if (IsFloatingPoint(t) && (!widest || DTypeSize(t) > DTypeSize(*widest))) widest = t;
    }
    const OpPrecision p = node.is_backward() ? OpPrecision::kKeep : policy_.Of(node.op->name);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!IsFloatingPoint(dtypes[i])) continue;
      const DType want = Wanted(p, i, dtypes[i], policy_.low, *widest);
      if (want == dtypes[i]) continue;
      inputs[i] = CastOf(inputs[i], want);
      dtypes[i] = want;
    }
    std::vector<DType> out;
    try {
      out = InferTypes(*node.op, node.attrs, dtypes);
    } catch (const Error& e) {
      WEFT_THROW("mixed_precision: at node '" << Abbreviate(node.name) << "': " << e.what());
    }
    Record(r_.Keep(n, std::move(inputs)), node.name, std::move(out));
  }

  int casts() const { return casts_; }
  Graph Finish() && { return std::move(r_).Finish(); }

 private:
  DType TypeOf(NodeEntry e) const { return dtypes_.at(e.node).at(e.index); }
  void Record(uint32_t node, const std::string& name, std::vector<DType> types) {
    dtypes_.resize(std::max<size_t>(dtypes_.size(), node + 1));
    names_.resize(dtypes_.size());
    dtypes_[node] = std::move(types);
    names_[node] = name;
  }

  // New entry `e` cast to `dtype`.
  NodeEntry CastOf(NodeEntry e, DType dtype) {
    const auto key = std::make_tuple(e.node, e.index, dtype);
    if (auto it = made_.find(key); it != made_.end()) return it->second;
    const weft::Op& cast = GetOp("Cast");
    Node node;
    node.op = &cast;
    node.name = names_[e.node] + (e.index == 0 ? "" : std::to_string(e.index)) + "_" +
                std::string(DTypeName(dtype));
    node.attrs = ParseAttrs(cast, {{"dtype", std::string(DTypeName(dtype))}});
    node.inputs = {e};
    const std::string name = node.name;
    Record(r_.Add(std::move(node), {}), name, {dtype});
    ++casts_;
    return made_[key] = NodeEntry{r_.num_nodes() - 1, 0};
  }

  const Graph& g_;
  const PrecisionPolicy& policy_;
  GraphRewrite r_;
  std::vector<std::vector<DType>> dtypes_;  // per new node, its outputs'
  std::vector<std::string> names_;          // per new node
  std::map<std::tuple<uint32_t, uint32_t, DType>, NodeEntry> made_;
  int casts_ = 0;
};

}  // namespace

OpPrecision PrecisionPolicy::Of(const std::string& op) const {
  if (auto it = overrides.find(op); it != overrides.end()) return it->second;
  for (const auto& [name, precision] : kPrecisionTable) {
    if (op == name) return precision;
  }
  return OpPrecision::kWidest;
}

Graph MixedPrecision(const Graph& g, const PrecisionPolicy& policy,
                     const std::map<std::string, DType>& argument_dtypes, int* casts) {
  if (!Is16BitFloat(policy.low)) {
    WEFT_THROW("mixed_precision: expected a low dtype of bfloat16 or float16, found "
               << policy.low);
  }
  Mixer m(g, policy);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.node(n);
    if (!node.is_variable()) {
      m.Op(n);
      continue;
    }
    auto it = argument_dtypes.find(node.name);
    m.Variable(n, it == argument_dtypes.end() ? DType::kFloat32 : it->second);
  }
  if (casts != nullptr) *casts = m.casts();
  return std::move(m).Finish();
}

const Node* CastArgument(const Graph& g, uint32_t n, DType dtype) {
  const Node& node = g.node(n);
  if (node.is_variable() || node.is_backward() || node.op->name != "Cast") return nullptr;
  if (node.inputs.size() != 1 || node.attrs.Get<CastParam>().dtype != dtype) return nullptr;
  const Node& from = g.node(node.inputs[0].node);
  return from.is_variable() ? &from : nullptr;
}

std::vector<std::string> CastArguments(const Graph& g, DType dtype) {
  std::vector<std::string> names;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (const Node* argument = CastArgument(g, n, dtype)) names.push_back(argument->name);
  }
  return names;
}

}  // namespace weft
