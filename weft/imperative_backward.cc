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

// Where node `n` of the rule writes: each output that is the direct target of an input's gradient
// goes into the caller's array (added to it for kAddTo, marking the input `done`), the others
// into new arrays of the shapes and dtypes the node's op infers on the inputs' device.
InvokeOptions NodeOutputs(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                          int n, const std::map<std::pair<int, int>, int>& targets,
                          const std::vector<NDArray>& input_grads, const std::vector<OpReq>& req,
                          std::vector<bool>& done) {
  std::vector<Shape> shapes;
  std::vector<DType> types;
  for (const NDArray& a : inputs) shapes.push_back(a.shape()), types.push_back(a.dtype());
  const Device device = inputs.at(0).device();
  const std::vector<Shape> out_shapes = InferShapes(op, attrs, shapes, device.type);
  const std::vector<DType> out_types = InferTypes(op, attrs, types);
  InvokeOptions options;
  for (int o = 0; o < static_cast<int>(out_shapes.size()); ++o) {
    const auto it = targets.find({n, o});
    if (it == targets.end()) {
      options.outputs.push_back(NDArray(out_shapes[o], device, out_types[o]));
      options.req.push_back(OpReq::kWrite);
      continue;
    }
    options.outputs.push_back(input_grads[it->second]);
    options.req.push_back(req[it->second] == OpReq::kAddTo ? OpReq::kAddTo : OpReq::kWrite);
    done[it->second] = true;
  }
  return options;
}

// Stores each input's gradient that no node wrote directly: copied, or added for kAddTo.
void StoreInputGrads(const GradBuilder& g, const BackwardRun& run, const std::vector<bool>& done,
                     const std::vector<NDArray>& input_grads, const std::vector<OpReq>& req) {
  for (size_t i = 0; i < input_grads.size(); ++i) {
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

}  // namespace

void InvokeBackward(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                    const std::vector<NDArray>& outputs, const std::vector<NDArray>& output_grads,
                    const std::vector<NDArray>& input_grads, const std::vector<OpReq>& req,
                    bool is_train) {
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
    InvokeOptions options = NodeOutputs(node_op, node_attrs, node_inputs, static_cast<int>(n),
                                        targets, input_grads, req, done);
    options.is_train = is_train;
    run.node_outputs.push_back(Invoke(node_op, node_attrs, node_inputs, options));
  }
  StoreInputGrads(g, run, done, input_grads, req);
}

}  // namespace weft
