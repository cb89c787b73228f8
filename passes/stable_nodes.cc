#include "passes/stable_nodes.h"

#include <set>
#include <string>

#include "ops/op.h"

namespace weft {

namespace {

// Per node: an argument no op mutates, or an op node of the forward pass, deterministic and
// without other effects, all of whose inputs are such nodes.
std::vector<bool> ArgumentOnly(const Graph& g) {
  std::vector<bool> mutated(g.nodes().size(), false);  // argument nodes an op updates
  for (const Node& node : g.nodes()) {
    if (node.is_variable()) continue;
    for (int i : node.op->mutate_inputs) mutated[node.inputs[i].node] = true;
  }
  std::vector<bool> only(g.nodes().size(), false);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    const Node& node = g.node(n);
    if (node.is_variable()) {
      only[n] = !mutated[n];
      continue;
    }
    if (node.is_backward() || node.op->HasEffects() || !node.op->HostInputsOf(node.attrs).empty())
      continue;
    bool all = !node.inputs.empty();
    for (const NodeEntry& in : node.inputs) all = all && only[in.node];
    only[n] = all;
  }
  return only;
}

// Whether input `i` of `node` is one of a layer's parameters (its weight, bias, BatchNorm's or
// LayerNorm's affine terms and statistics, an RNN's packed parameters), by the op's input names.
bool IsParameterInput(const Node& node, size_t i) {
  static const std::set<std::string> kParameters = {"weight",    "bias",        "gamma",
                                                    "beta",      "moving_mean", "moving_var",
                                                    "dw_weight", "dw_bias",     "parameters"};
  const std::vector<std::string> names = InputNames(*node.op, node.attrs);
  return i < names.size() && kParameters.contains(names[i]);
}

}  // namespace

std::vector<bool> StableNodes(const Graph& g) {
  const std::vector<bool> only = ArgumentOnly(g);
  // Of those, the ones that feed a layer's parameter inputs, directly or through other such
  // nodes. Nodes on the data's path are not stable even when every argument they read is
  // unchanged: a caller may refill its data array in place between calls.
  std::vector<bool> stable(g.nodes().size(), false);
  for (uint32_t n = static_cast<uint32_t>(g.nodes().size()); n-- > 0;) {
    const Node& node = g.node(n);
    if (node.is_variable()) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const uint32_t in = node.inputs[i].node;
      if (only[in] && !g.node(in).is_variable() && (stable[n] || IsParameterInput(node, i)))
        stable[in] = true;
    }
  }
  return stable;
}

std::vector<bool> StableEntries(const Graph& g) {
  const std::vector<bool> stable = StableNodes(g);
  std::vector<bool> entries(g.num_entries(), false);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (!stable[n]) continue;
    for (uint32_t o = 0; o < g.num_outputs(n); ++o) entries[g.EntryId({n, o})] = true;
  }
  for (const NodeEntry& e : g.outputs()) entries[g.EntryId(e)] = false;
  return entries;
}

}  // namespace weft
