#include "graph/symbol.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/text.h"

namespace weft {

struct Symbol::SymNode {
  const weft::Op* op = nullptr;  // null: variable
  std::string name;
  Attrs attrs;
  std::vector<SymEntry> inputs;

  ~SymNode();
};

// Releasing the inputs one by one would destroy a chain recursively, a stack frame per node: a
// 20,000-node chain overflows the stack. Instead, an input this node is the last owner of gives
// up its own inputs to a work list first, so each node dies with no inputs left. use_count() == 1
// is exact here: no other owner exists, and with no weak pointers none can appear.
Symbol::SymNode::~SymNode() {
  std::vector<std::shared_ptr<const SymNode>> pending;
  for (SymEntry& e : inputs) pending.push_back(std::move(e.node));
  while (!pending.empty()) {
    std::shared_ptr<const SymNode> node = std::move(pending.back());
    pending.pop_back();
    if (node.use_count() != 1) continue;  // another owner keeps it alive
    // Made by make_shared<SymNode>: not a const object, only viewed through const pointers.
    for (SymEntry& e : const_cast<SymNode&>(*node).inputs) pending.push_back(std::move(e.node));
    node.reset();  // the last owner: it dies here, with no inputs left to release
  }
}

namespace {

std::string DefaultName(const std::string& op) {
  static std::atomic<uint64_t> counter{0};
  std::string lower = op;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower + std::to_string(counter.fetch_add(1));
}

}  // namespace

Symbol Symbol::Variable(const std::string& name) {
  WEFT_CHECK(!name.empty()) << "Symbol::Variable: a variable needs a name";
  auto node = std::make_shared<SymNode>();
  node->name = name;
  Symbol s;
  s.outputs_.push_back({node, 0});
  return s;
}

Symbol Symbol::Op(const std::string& op_name, const std::vector<Symbol>& inputs,
                  const AttrMap& attrs, const std::string& name) {
  const weft::Op& op = GetOp(op_name);
  auto node = std::make_shared<SymNode>();
  node->op = &op;
  node->name = name.empty() ? DefaultName(op_name) : name;
  node->attrs = ParseAttrs(op, attrs);
  const int expected = NumInputs(op, node->attrs);
  if (static_cast<int>(inputs.size()) > expected) {
    WEFT_THROW("op '" << op_name << "' (" << node->name << "): expected at most " << expected
                      << " input(s), found " << inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].num_outputs() != 1) {
      WEFT_THROW("op '" << op_name << "' (" << node->name << "): input " << i << " has "
                        << inputs[i].num_outputs() << " outputs; expected one (select it with [])");
    }
    node->inputs.push_back(inputs[i].outputs_[0]);
  }
  const std::vector<std::string> names = InputNames(op, node->attrs);
  for (int i = static_cast<int>(inputs.size()); i < expected; ++i) {
    const std::string input =
        i < static_cast<int>(names.size()) ? names[i] : "arg" + std::to_string(i);
    node->inputs.push_back(Variable(node->name + "_" + input).outputs_[0]);
  }
  Symbol s;
  const uint32_t outputs = static_cast<uint32_t>(NumVisibleOutputs(op, node->attrs));
  for (uint32_t o = 0; o < outputs; ++o) s.outputs_.push_back({node, o});
  return s;
}

Symbol Symbol::Group(const std::vector<Symbol>& symbols) {
  Symbol s;
  for (const Symbol& sym : symbols)
    s.outputs_.insert(s.outputs_.end(), sym.outputs_.begin(), sym.outputs_.end());
  return s;
}

Symbol Symbol::operator[](size_t output) const {
  WEFT_CHECK_LT(output, outputs_.size()) << "Symbol: no output " << output;
  Symbol s;
  s.outputs_.push_back(outputs_[output]);
  return s;
}

Graph Symbol::ToGraph() const {
  // Iterative post-order walk from the outputs: every node after its inputs, each once.
  GraphBuilder g;
  std::unordered_map<const SymNode*, uint32_t> index;
  std::vector<std::pair<const SymNode*, size_t>> stack;
  for (const SymEntry& out : outputs_) {
    if (!index.count(out.node.get())) stack.push_back({out.node.get(), 0});
    while (!stack.empty()) {
      auto& [node, next_input] = stack.back();
      if (next_input < node->inputs.size()) {
        const SymNode* input = node->inputs[next_input++].node.get();
        if (!index.count(input)) stack.push_back({input, 0});
        continue;
      }
      if (!index.count(node)) {
        Node n{node->op, node->name, node->attrs, {}, -1};
        for (const SymEntry& e : node->inputs)
          n.inputs.push_back({index.at(e.node.get()), e.index});
        index[node] = static_cast<uint32_t>(g.nodes.size());
        g.nodes.push_back(std::move(n));
      }
      stack.pop_back();
    }
  }
  for (const SymEntry& out : outputs_) g.outputs.push_back({index.at(out.node.get()), out.index});
  g.num_forward_outputs = g.outputs.size();
  Graph frozen = std::move(g).Freeze();
  // Arguments are bound by name: two different variables may not share one.
  std::map<std::string, uint32_t> seen;
  for (uint32_t n : frozen.ArgumentNodes()) {
    auto [it, inserted] = seen.emplace(frozen.node(n).name, n);
    if (!inserted)
      WEFT_THROW("graph: two different variables are named '" << Abbreviate(frozen.node(n).name)
                                                              << "'");
  }
  return frozen;
}

Symbol Symbol::FromGraph(const Graph& g) {
  std::vector<std::shared_ptr<SymNode>> nodes;
  for (const Node& n : g.nodes()) {
    auto node = std::make_shared<SymNode>();
    node->op = n.op;
    node->name = n.name;
    node->attrs = n.attrs;
    for (const NodeEntry& e : n.inputs) node->inputs.push_back({nodes.at(e.node), e.index});
    nodes.push_back(node);
  }
  Symbol s;
  for (const NodeEntry& e : g.outputs()) s.outputs_.push_back({nodes.at(e.node), e.index});
  return s;
}

std::vector<std::string> Symbol::ListArguments() const {
  const Graph g = ToGraph();
  std::vector<std::string> names;
  for (uint32_t n : g.ArgumentNodes()) names.push_back(g.node(n).name);
  return names;
}

std::vector<std::string> Symbol::ListOutputs() const {
  std::vector<std::string> names;
  for (const SymEntry& e : outputs_) {
    names.push_back(e.node->name + "_output" + (e.index > 0 ? std::to_string(e.index) : ""));
  }
  return names;
}

}  // namespace weft
