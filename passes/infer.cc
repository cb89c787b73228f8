#include "passes/infer.h"

#include <sstream>

#include "core/error.h"

namespace weft {

namespace {

// The forward output whose gradient head-grad variable `n` carries, if it is one.
const NodeEntry* HeadGradOutput(const Graph& g, uint32_t n) {
  for (size_t i = 0; i < g.head_grads.size(); ++i) {
    if (g.head_grads[i] == n) return &g.outputs[i];
  }
  return nullptr;
}

void InferVariable(const Graph& g, uint32_t n, const std::map<std::string, Shape>& shapes,
                   const std::map<std::string, DType>& dtypes, std::vector<Shape>& s, std::vector<DType>& t) {
  const Node& node = g.nodes[n];
  const uint32_t e = g.EntryId({n, 0});
  if (const NodeEntry* out = HeadGradOutput(g, n)) {
    s[e] = s[g.EntryId(*out)];
    t[e] = t[g.EntryId(*out)];
    return;
  }
  auto it = shapes.find(node.name);
  if (it == shapes.end()) WEFT_THROW("shape inference: argument '" << node.name << "' has no shape; expected one for every argument");
  s[e] = it->second;
  auto dt = dtypes.find(node.name);
  t[e] = dt == dtypes.end() ? DType::kFloat32 : dt->second;
}

void InferNode(const Graph& g, uint32_t n, std::vector<Shape>& s, std::vector<DType>& t) {
  const Node& node = g.nodes[n];
  std::vector<Shape> in_shapes;
  std::vector<DType> in_types;
  for (const NodeEntry& e : node.inputs) {
    in_shapes.push_back(s[g.EntryId(e)]);
    in_types.push_back(t[g.EntryId(e)]);
  }
  std::vector<Shape> out_shapes;
  std::vector<DType> out_types;
  try {
    out_shapes = InferShapes(*node.op, node.attrs, in_shapes);
    out_types = InferTypes(*node.op, node.attrs, in_types);
  } catch (const Error& e) {
    std::ostringstream inputs;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      inputs << (i ? ", " : "") << g.nodes[node.inputs[i].node].name << " " << in_shapes[i];
    }
    WEFT_THROW("shape inference failed at node '" << node.name << "' (op '" << node.op->name << "', inputs: "
                                                   << inputs.str() << "): " << e.what());
  }
  for (uint32_t o = 0; o < out_shapes.size(); ++o) {
    s[g.EntryId({n, o})] = out_shapes[o];
    t[g.EntryId({n, o})] = out_types[o];
  }
}

}  // namespace

Graph InferShapesAndTypes(Graph g, const std::map<std::string, Shape>& shapes,
                          const std::map<std::string, DType>& dtypes) {
  std::vector<Shape> s(g.num_entries());
  std::vector<DType> t(g.num_entries(), DType::kFloat32);
  for (uint32_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].is_variable()) {
      InferVariable(g, n, shapes, dtypes, s, t);
    } else {
      InferNode(g, n, s, t);
    }
  }
  g.shapes = std::move(s);
  g.dtypes = std::move(t);
  return g;
}

}  // namespace weft
