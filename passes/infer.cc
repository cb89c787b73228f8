#include "passes/infer.h"

#include <numeric>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace weft {

namespace {

// The forward output whose gradient head-grad variable `n` carries, if it is one.
const NodeEntry* HeadGradOutput(const Graph& g, uint32_t n) {
  for (size_t i = 0; i < g.head_grads().size(); ++i) {
    if (g.head_grads()[i] == n) return &g.outputs()[i];
  }
  return nullptr;
}

class Inference {
 public:
  Inference(const Graph& g, const std::map<std::string, Shape>& shapes,
            const std::map<std::string, DType>& dtypes, std::optional<DeviceType> device)
      : g_(g),
        given_(shapes),
        dtypes_(dtypes),
        device_(device),
        s_(g.num_entries()),
        t_(g.num_entries(), DType::kFloat32) {}

  // Op nodes in order; one whose inputs are not all known yet waits for a later sweep, which a
  // node reading it may make possible by giving a variable its shape through a cast or unary
  // pointwise op (LayerNorm's float32 gamma, Cast of a bfloat16 parameter). A sweep that settles
  // nothing reports the first waiting op node's missing input.
  void Run() {
    std::vector<uint32_t> waiting(g_.nodes().size());
    std::iota(waiting.begin(), waiting.end(), 0u);
    while (!waiting.empty()) {
      std::vector<uint32_t> still;
      for (uint32_t n : waiting) {
        if (g_.node(n).is_variable()) {
          if (!Variable(n)) still.push_back(n);
        } else if (InputsKnown(n)) {
          OpNode(n);
        } else {
          still.push_back(n);
        }
      }
      if (still.size() == waiting.size()) {
        // The first waiting op node (a head gradient waits on one): its missing input.
        for (uint32_t n : still) {
          if (!g_.node(n).is_variable()) ReportMissingInput(n);
        }
        WEFT_THROW("shape inference: " << still.size() << " head gradient(s) never got a shape");
      }
      waiting = std::move(still);
    }
  }
  std::vector<Shape> shapes() const {
    std::vector<Shape> out;
    for (const auto& s : s_) out.push_back(s.value_or(Shape()));
    return out;
  }
  const std::vector<DType>& dtypes() const { return t_; }
  // The argument shapes, given and inferred.
  std::map<std::string, Shape> ArgumentShapes() const {
    std::map<std::string, Shape> out;
    for (uint32_t n : g_.ArgumentNodes()) {
      if (const auto& s = s_[g_.EntryId({n, 0})]) out[g_.node(n).name] = *s;
    }
    return out;
  }

 private:
  // False for a head gradient whose output has no shape yet.
  bool Variable(uint32_t n) {
    const uint32_t e = g_.EntryId({n, 0});
    if (const NodeEntry* out = HeadGradOutput(g_, n)) {
      s_[e] = s_[g_.EntryId(*out)];
      t_[e] = t_[g_.EntryId(*out)];
      return s_[e].has_value();
    }
    auto it = given_.find(g_.node(n).name);
    if (it != given_.end()) s_[e] = it->second;  // else: perhaps inferred from a node that reads it
    auto dt = dtypes_.find(g_.node(n).name);
    t_[e] = dt == dtypes_.end() ? DType::kFloat32 : dt->second;
    return true;
  }

  // Whether every input of node `n` has a shape, after giving the variables it reads (directly,
  // or through shape-keeping pointwise ops) the shapes the op can tell from its other inputs.
  bool InputsKnown(uint32_t n) {
    const Node& node = g_.node(n);
    std::vector<std::optional<Shape>> in;
    for (const NodeEntry& e : node.inputs) in.push_back(s_[g_.EntryId(e)]);
    if (node.op->infer_input_shapes) node.op->infer_input_shapes(node.attrs, in);
    bool known = true;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!s_[g_.EntryId(node.inputs[i])] && in[i]) GiveVariableShape(node.inputs[i], *in[i]);
      known = known && s_[g_.EntryId(node.inputs[i])].has_value();
    }
    return known;
  }

  // The variable behind `e`, through ops whose output has their first input's shape, gets `shape`.
  void GiveVariableShape(NodeEntry e, const Shape& shape) {
    while (!g_.node(e.node).is_variable()) {
      const Node& producer = g_.node(e.node);
      const PointwiseKind kind = producer.op->pointwise.kind;
      if (kind != PointwiseKind::kCast && kind != PointwiseKind::kUnary) return;
      e = producer.inputs[0];
    }
    auto& s = s_[g_.EntryId(e)];
    if (!s) s = shape;
  }

  [[noreturn]] void ReportMissingInput(uint32_t n) const {
    const Node& node = g_.node(n);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (s_[g_.EntryId(node.inputs[i])]) continue;
      WEFT_THROW("shape inference: node '"
                 << node.name << "' (op '" << node.op->name << "'): input " << i << " ('"
                 << g_.node(node.inputs[i].node).name
                 << "') has no shape; give a shape for every argument it depends on");
    }
    WEFT_THROW("shape inference: node '" << node.name << "' was never settled");
  }

  void OpNode(uint32_t n) {
    const Node& node = g_.node(n);
    std::vector<Shape> in_shapes;
    std::vector<DType> in_types;
    for (const NodeEntry& e : node.inputs)
      in_shapes.push_back(*s_[g_.EntryId(e)]), in_types.push_back(t_[g_.EntryId(e)]);
    std::vector<Shape> out_shapes;
    std::vector<DType> out_types;
    try {
      out_shapes = InferShapes(*node.op, node.attrs, in_shapes, device_);
      out_types = InferTypes(*node.op, node.attrs, in_types);
    } catch (const Error& e) {
      std::ostringstream inputs;
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        inputs << (i ? ", " : "") << g_.node(node.inputs[i].node).name << " " << in_shapes[i];
      }
      WEFT_THROW("shape inference failed at node '" << node.name << "' (op '" << node.op->name
                                                    << "', inputs: " << inputs.str()
                                                    << "): " << e.what());
    }
    for (uint32_t o = 0; o < out_shapes.size(); ++o) {
      s_[g_.EntryId({n, o})] = out_shapes[o];
      t_[g_.EntryId({n, o})] = out_types[o];
    }
  }

  const Graph& g_;
  const std::map<std::string, Shape> given_;  // copies: callers may pass temporaries
  const std::map<std::string, DType> dtypes_;
  const std::optional<DeviceType> device_;
  std::vector<std::optional<Shape>> s_;  // per entry
  std::vector<DType> t_;                 // per entry
};

}  // namespace

Graph InferShapesAndTypes(const Graph& g, const std::map<std::string, Shape>& shapes,
                          const std::map<std::string, DType>& dtypes,
                          std::optional<DeviceType> device) {
  Inference inference(g, shapes, dtypes, device);
  inference.Run();
  return g.WithTypes(inference.shapes(), inference.dtypes());
}

std::vector<DType> InferEntryTypes(const Graph& g, const std::map<std::string, DType>& dtypes) {
  std::vector<DType> t(g.num_entries(), DType::kFloat32);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.node(n);
    if (node.is_variable()) {  // a head gradient comes after the forward output it carries
      auto it = dtypes.find(node.name);
      if (const NodeEntry* out = HeadGradOutput(g, n)) {
        t[g.EntryId({n, 0})] = t[g.EntryId(*out)];
      } else if (it != dtypes.end()) {
        t[g.EntryId({n, 0})] = it->second;
      }
      continue;
    }
    std::vector<DType> in;
    for (const NodeEntry& e : node.inputs) in.push_back(t[g.EntryId(e)]);
    const std::vector<DType> out = InferTypes(*node.op, node.attrs, in);
    for (uint32_t o = 0; o < out.size(); ++o) t[g.EntryId({n, o})] = out[o];
  }
  return t;
}

std::map<std::string, Shape> InferArgumentShapes(const Graph& g,
                                                 const std::map<std::string, Shape>& shapes,
                                                 const std::map<std::string, DType>& dtypes) {
  Inference inference(g, shapes, dtypes, std::nullopt);
  inference.Run();
  return inference.ArgumentShapes();
}

}  // namespace weft
