#include "passes/infer.h"

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

  void Run() {
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (g_.node(n).is_variable()) {
        Variable(n);
      } else {
        OpNode(n);
      }
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
  void Variable(uint32_t n) {
    const uint32_t e = g_.EntryId({n, 0});
    if (const NodeEntry* out = HeadGradOutput(g_, n)) {
      s_[e] = s_[g_.EntryId(*out)];
      t_[e] = t_[g_.EntryId(*out)];
      return;
    }
    auto it = given_.find(g_.node(n).name);
    if (it != given_.end()) s_[e] = it->second;  // else: perhaps inferred from a node that reads it
    auto dt = dtypes_.find(g_.node(n).name);
    t_[e] = dt == dtypes_.end() ? DType::kFloat32 : dt->second;
  }

  // Shapes of variables this node reads that nothing gave: from the op, when it can tell.
  void FillInputs(uint32_t n, std::vector<std::optional<Shape>>& in) {
    const Node& node = g_.node(n);
    if (node.op->infer_input_shapes) node.op->infer_input_shapes(node.attrs, in);
    for (size_t i = 0; i < in.size(); ++i) {
      const uint32_t e = g_.EntryId(node.inputs[i]);
      if (!s_[e] && in[i] && g_.node(node.inputs[i].node).is_variable()) s_[e] = in[i];
      if (!s_[e]) {
        WEFT_THROW("shape inference: node '"
                   << node.name << "' (op '" << node.op->name << "'): input " << i << " ('"
                   << g_.node(node.inputs[i].node).name
                   << "') has no shape; give a shape for every argument it depends on");
      }
    }
  }

  void OpNode(uint32_t n) {
    const Node& node = g_.node(n);
    std::vector<std::optional<Shape>> known;
    for (const NodeEntry& e : node.inputs) known.push_back(s_[g_.EntryId(e)]);
    FillInputs(n, known);
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

std::map<std::string, Shape> InferArgumentShapes(const Graph& g,
                                                 const std::map<std::string, Shape>& shapes,
                                                 const std::map<std::string, DType>& dtypes) {
  Inference inference(g, shapes, dtypes, std::nullopt);
  inference.Run();
  return inference.ArgumentShapes();
}

}  // namespace weft
