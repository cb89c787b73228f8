#include "passes/gradient.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "passes/prune.h"

namespace weft {

namespace {

class BackwardGraphBuilder {
 public:
  BackwardGraphBuilder(const Graph& forward, const std::vector<uint32_t>& wrt)
      : g_(forward.ToBuilder()),
        forward_nodes_(static_cast<uint32_t>(forward.nodes().size())),
        wrt_(wrt) {}

  Graph Build() {
    MarkNodesOnPaths();
    AddHeadGrads();
    for (uint32_t n = forward_nodes_; n-- > 0;) {
      if (on_path_[n] && !g_.nodes[n].is_variable()) Differentiate(n);
    }
    g_.num_forward_outputs = g_.outputs.size();
    std::vector<NodeEntry> sums;
    for (uint32_t arg : wrt_) sums.push_back(Sum({arg, 0}));
    std::set<NodeEntry> read;  // by some node
    for (const Node& node : g_.nodes) read.insert(node.inputs.begin(), node.inputs.end());
    for (size_t i = 0; i < wrt_.size(); ++i) {
      const NodeEntry e = sums[i];
      const bool own = g_.nodes[e.node].is_backward() && !read.contains(e) &&
                       std::count(sums.begin(), sums.end(), e) == 1 &&
                       std::find(g_.outputs.begin(), g_.outputs.end(), e) == g_.outputs.end();
      g_.outputs.push_back(own ? e : Copy(e, g_.nodes[wrt_[i]].name + "_grad"));
    }
    return Prune(std::move(g_).Freeze());
  }

 private:
  // A node needs differentiating when it depends on a requested argument.
  void MarkNodesOnPaths() {
    on_path_.assign(forward_nodes_, false);
    for (uint32_t arg : wrt_) {
      WEFT_CHECK(arg < forward_nodes_ && g_.nodes[arg].is_variable())
          << "gradient: node " << arg << " is not an argument";
      on_path_[arg] = true;
    }
    for (uint32_t n = 0; n < forward_nodes_; ++n) {
      for (const NodeEntry& e : g_.nodes[n].inputs) on_path_[n] = on_path_[n] || on_path_[e.node];
    }
  }

  void AddHeadGrads() {
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const NodeEntry out = g_.outputs[i];
      const uint32_t var = AddNode(
          Node{nullptr,
               g_.nodes[out.node].name + "_output" + std::to_string(out.index) + "_head_grad",
               {},
               {},
               -1});
      g_.head_grads.push_back(var);
      grads_[out].push_back({var, 0});
    }
  }

  // Each gradient output must be an entry of its own that nothing else reads (Build): the
  // executor writes (or adds) it into the user's gradient array, so a reader would see the array
  // after the addition. A head gradient, a forward entry, an output, an entry a node reads or the
  // gradient of several arguments is given a copy, one per output.
  NodeEntry Copy(NodeEntry e, const std::string& name) {
    const Op& copy = GetOp("_copy");
    return {AddNode(Node{
                &copy, name + "_copy", ParseAttrs(copy, {}), {e}, static_cast<int64_t>(e.node)}),
            0};
  }

  uint32_t AddNode(Node node) {
    g_.nodes.push_back(std::move(node));
    return static_cast<uint32_t>(g_.nodes.size()) - 1;
  }

  // The total gradient flowing into `e`: one entry, an add_n of several, or zeros_like.
  NodeEntry Sum(NodeEntry e) {
    std::vector<NodeEntry>& parts = grads_[e];
    if (parts.size() == 1) return parts[0];
    const std::string name = g_.nodes[e.node].name + "_grad" + std::to_string(e.index);
    if (parts.empty()) {
      const Op& zeros = GetOp("zeros_like");
      parts.push_back(
          {AddNode(Node{&zeros, name + "_zeros", ParseAttrs(zeros, {}), {e}, e.node}), 0});
      return parts[0];
    }
    const Op& add_n = GetOp("add_n");
    const AttrMap attrs = {{"num_args", std::to_string(parts.size())}};
    const NodeEntry sum{
        AddNode(Node{&add_n, name + "_sum", ParseAttrs(add_n, attrs), parts, e.node}), 0};
    parts = {sum};
    return sum;
  }

  void Differentiate(uint32_t n) {
    const Node fwd = g_.nodes[n];  // a copy: AddNode may reallocate
    if (!fwd.op->gradient)
      WEFT_THROW("gradient: node '" << fwd.name << "' (op '" << fwd.op->name
                                    << "') has no gradient");
    GradBuilder rule(static_cast<int>(fwd.inputs.size()), static_cast<int>(fwd.num_outputs()));
    fwd.op->gradient(fwd.attrs, rule);
    std::vector<NodeEntry> out_grads;
    for (uint32_t o = 0; o < fwd.num_outputs(); ++o) out_grads.push_back(Sum({n, o}));
    std::vector<uint32_t> built;
    auto resolve = [&](const GradEntry& e) -> NodeEntry {
      switch (e.kind) {
        case GradEntry::Kind::kInput:
          return fwd.inputs.at(e.index);
        case GradEntry::Kind::kOutput:
          return {n, static_cast<uint32_t>(e.index)};
        case GradEntry::Kind::kOutGrad:
          return out_grads.at(e.index);
        case GradEntry::Kind::kNode:
          return {built.at(e.index), static_cast<uint32_t>(e.output)};
      }
      return {};
    };
    for (size_t k = 0; k < rule.nodes().size(); ++k) {
      const GradNode& gn = rule.nodes()[k];
      const Op& op = GetOp(gn.op);
      Node node{&op,
                fwd.name + "_backward" + (k ? std::to_string(k) : ""),
                ParseAttrs(op, gn.attrs),
                {},
                n};
      for (const GradEntry& e : gn.inputs) node.inputs.push_back(resolve(e));
      built.push_back(AddNode(std::move(node)));
    }
    for (size_t i = 0; i < fwd.inputs.size(); ++i) {
      const auto& grad = rule.input_grads()[i];
      if (grad && on_path_[fwd.inputs[i].node]) grads_[fwd.inputs[i]].push_back(resolve(*grad));
    }
  }

  GraphBuilder g_;
  const uint32_t forward_nodes_;
  const std::vector<uint32_t> wrt_;
  std::vector<bool> on_path_;
  std::map<NodeEntry, std::vector<NodeEntry>> grads_;  // forward entry -> gradients flowing into it
};

}  // namespace

Graph Gradient(const Graph& forward, const std::vector<uint32_t>& wrt) {
  return BackwardGraphBuilder(forward, wrt).Build();
}

}  // namespace weft
