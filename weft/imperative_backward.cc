// InvokeBackward: runs an op's gradient rule on arrays (see imperative.h).
#include <map>

#include "core/error.h"
#include "weft/imperative.h"

namespace weft {

namespace {

struct BackwardRun {
  const std::vector<NDArray>& inputs;
  const std::vector<NDArray>& outputs;
  const std::vector<NDArray>& output_grads;
  std::vector<std::vector<NDArray>> node_outputs;

  NDArray Resolve(const GradEntry& e) const {
    switch (e.kind) {
      case GradEntry::Kind::kInput:
        return inputs.at(e.index);
      case GradEntry::Kind::kOutput:
        return outputs.at(e.index);
      case GradEntry::Kind::kOutGrad:
        return output_grads.at(e.index);
      case GradEntry::Kind::kNode:
        return node_outputs.at(e.index).at(e.output);
    }
    return NDArray();
  }
};

bool SameEntry(const GradEntry& a, const GradEntry& b) {
  return a.kind == b.kind && a.index == b.index && a.output == b.output;
}

// For each node output that is the gradient of exactly one input and read by nothing else, that
// input: the node can then write (or add) straight into the caller's gradient array.
std::map<std::pair<int, int>, int> DirectTargets(const GradBuilder& g,
                                                 const std::vector<NDArray>& input_grads,
                                                 const std::vector<OpReq>& req) {
  std::map<std::pair<int, int>, int> uses;  // (node, output) -> times read
  for (const GradNode& n : g.nodes()) {
    for (const GradEntry& e : n.inputs) {
      if (e.kind == GradEntry::Kind::kNode) ++uses[{e.index, e.output}];
    }
  }
  std::map<std::pair<int, int>, int> targets;
  for (size_t i = 0; i < g.input_grads().size(); ++i) {
    const auto& grad = g.input_grads()[i];
    if (!grad || grad->kind != GradEntry::Kind::kNode || input_grads[i].is_none() ||
        req[i] == OpReq::kNull)
      continue;
    int sharing = 0;
    for (const auto& other : g.input_grads()) sharing += other && SameEntry(*other, *grad);
    if (sharing == 1 && uses[{grad->index, grad->output}] == 0)
      targets[{grad->index, grad->output}] = static_cast<int>(i);
  }
  return targets;
}

}  // namespace

void InvokeBackward(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                    const std::vector<NDArray>& outputs, const std::vector<NDArray>& output_grads,
                    const std::vector<NDArray>& input_grads, const std::vector<OpReq>& req) {
  if (!op.gradient) WEFT_THROW("op '" << op.name << "' has no gradient");
  WEFT_CHECK_EQ(input_grads.size(), inputs.size())
      << "op '" << op.name << "': one gradient array per input";
  WEFT_CHECK_EQ(req.size(), inputs.size())
      << "op '" << op.name << "': one gradient request per input";
  GradBuilder g(static_cast<int>(inputs.size()), static_cast<int>(outputs.size()));
  op.gradient(attrs, g);
  const auto targets = DirectTargets(g, input_grads, req);
  BackwardRun run{inputs, outputs, output_grads, {}};
  std::vector<bool> done(inputs.size(), false);
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    const GradNode& node = g.nodes()[n];
    const Op& node_op = GetOp(node.op);
    const Attrs node_attrs = ParseAttrs(node_op, node.attrs);
    std::vector<NDArray> node_inputs;
    for (const GradEntry& e : node.inputs) node_inputs.push_back(run.Resolve(e));
    InvokeOptions options;
    std::vector<Shape> shapes;
    std::vector<DType> types;
    for (const NDArray& a : node_inputs) shapes.push_back(a.shape()), types.push_back(a.dtype());
    const std::vector<Shape> out_shapes =
        InferShapes(node_op, node_attrs, shapes, node_inputs.at(0).device().type);
    const std::vector<DType> out_types = InferTypes(node_op, node_attrs, types);
    for (int o = 0; o < static_cast<int>(out_shapes.size()); ++o) {
      auto it = targets.find({static_cast<int>(n), o});
      const bool direct = it != targets.end();
      options.outputs.push_back(
          direct ? input_grads[it->second]
                 : NDArray(out_shapes[o], node_inputs.at(0).device(), out_types[o]));
      options.req.push_back(direct
                                ? (req[it->second] == OpReq::kAddTo ? OpReq::kAddTo : OpReq::kWrite)
                                : OpReq::kWrite);
      if (direct) done[it->second] = true;
    }
    run.node_outputs.push_back(Invoke(node_op, node_attrs, node_inputs, options));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& grad = g.input_grads()[i];
    if (!grad || done[i] || input_grads[i].is_none() || req[i] == OpReq::kNull) continue;
    NDArray src = run.Resolve(*grad);
    if (req[i] == OpReq::kAddTo) {
      Invoke("add", {input_grads[i], src}, {}, {.outputs = {input_grads[i]}});
    } else {
      src.CopyTo(input_grads[i]);
    }
  }
}

}  // namespace weft
