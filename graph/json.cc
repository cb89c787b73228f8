// The JSON form of a Symbol:
//   {"weft_graph": 1,
//    "nodes": [{"op": "null", "name": "data", "attrs": {}, "inputs": []},
//              {"op": "FullyConnected", "name": "fc1", "attrs": {"num_hidden": "128"},
//               "inputs": [[0, 0], [1, 0], [2, 0]]}, ...],
//    "outputs": [[3, 0]]}
// Nodes are in topological order and refer to their inputs by position, so a file whose input
// points at a later node (a cycle) or at no node is rejected. Attributes are the strings the user
// gave; loading parses them again with the op's checks. The text is untrusted: its nesting is
// limited, ids of any width are checked against the graph, and messages quote only a few dozen
// bytes of any value (core/json.h).
#include "core/json.h"

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/error.h"
#include "core/text.h"
#include "graph/symbol.h"

namespace weft {

namespace {

constexpr int kFormatVersion = 1;
// The format nests five levels (the graph, its nodes, a node, its inputs, an input); deeper text
// is refused before it is parsed.
constexpr int kMaxDepth = 8;

nlohmann::json EntryJson(const NodeEntry& e) { return nlohmann::json::array({e.node, e.index}); }

// Ids are read at their full width (64 bits) and checked before they are narrowed to the IR's.
NodeEntry ParseEntry(const nlohmann::json& j, const GraphBuilder& g, size_t before,
                     const std::string& where) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned()) {
    WEFT_THROW("graph JSON: " << where << ": expected an entry [node, output], found "
                              << JsonForMessage(j));
  }
  const uint64_t node = j[0].get<uint64_t>(), index = j[1].get<uint64_t>();
  if (node >= before) {
    WEFT_THROW("graph JSON: " << where << ": refers to node " << node
                              << ", expected a node defined before it (0.."
                              << static_cast<int64_t>(before) - 1 << ")");
  }
  const Node& input = g.nodes[node];
  if (index >= input.num_outputs()) {
    WEFT_THROW("graph JSON: " << where << ": node '" << Abbreviate(input.name) << "' has "
                              << input.num_outputs() << " output(s), found output " << index);
  }
  return NodeEntry{static_cast<uint32_t>(node), static_cast<uint32_t>(index)};
}

Node ParseNode(const nlohmann::json& j, const GraphBuilder& g, size_t position) {
  const std::string where = "node " + std::to_string(position);
  if (!j.is_object() || !j.contains("op") || !j.contains("name") || !j["op"].is_string() ||
      !j["name"].is_string()) {
    WEFT_THROW("graph JSON: " << where
                              << ": expected an object with string fields \"op\" and \"name\"");
  }
  Node node;
  node.name = j["name"].get<std::string>();
  AttrMap attrs;
  if (j.contains("attrs")) {
    if (!j["attrs"].is_object())
      WEFT_THROW("graph JSON: " << where << " (" << Abbreviate(node.name)
                                << "): \"attrs\" must be an object");
    for (const auto& [key, value] : j["attrs"].items()) {
      if (!value.is_string()) {
        WEFT_THROW("graph JSON: " << where << ": attribute '" << Abbreviate(key)
                                  << "' must be a string, found " << JsonForMessage(value));
      }
      attrs[key] = value.get<std::string>();
    }
  }
  const std::string op = j["op"].get<std::string>();
  if (op != "null") {
    try {
      node.op = &GetOp(op);
      node.attrs = ParseAttrs(*node.op, attrs);
    } catch (const Error& e) {
      WEFT_THROW("graph JSON: " << where << " (" << Abbreviate(node.name) << "): " << e.what());
    }
  }
  const nlohmann::json inputs = j.value("inputs", nlohmann::json::array());
  if (!inputs.is_array()) WEFT_THROW("graph JSON: " << where << ": \"inputs\" must be an array");
  for (size_t i = 0; i < inputs.size(); ++i) {
    node.inputs.push_back(
        ParseEntry(inputs[i], g, position, where + " input " + std::to_string(i)));
  }
  if (node.op != nullptr &&
      static_cast<int>(node.inputs.size()) != NumInputs(*node.op, node.attrs)) {
    WEFT_THROW("graph JSON: " << where << " (" << Abbreviate(node.name) << ", op '"
                              << Abbreviate(op) << "'): expected "
                              << NumInputs(*node.op, node.attrs) << " input(s), found "
                              << node.inputs.size());
  }
  return node;
}

}  // namespace

std::string Symbol::ToJson() const {
  const Graph g = ToGraph();
  nlohmann::json nodes = nlohmann::json::array();
  for (const Node& n : g.nodes()) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const NodeEntry& e : n.inputs) inputs.push_back(EntryJson(e));
    nodes.push_back({{"op", n.op ? n.op->name : "null"},
                     {"name", n.name},
                     {"attrs", n.attrs.raw()},
                     {"inputs", inputs}});
  }
  nlohmann::json outputs = nlohmann::json::array();
  for (const NodeEntry& e : g.outputs()) outputs.push_back(EntryJson(e));
  try {
    return nlohmann::json{{"weft_graph", kFormatVersion}, {"nodes", nodes}, {"outputs", outputs}}
        .dump(1);
  } catch (const nlohmann::json::type_error& e) {  // a name or attribute that is not UTF-8
    WEFT_THROW("graph JSON: expected node names and attribute values of valid UTF-8, found "
               << e.what());
  }
}

Symbol Symbol::FromJson(const std::string& text) {
  ParsedJson parsed = ParseJson(text, kMaxDepth);
  if (!parsed.ok()) WEFT_THROW("graph JSON: expected a graph, found " << parsed.error);
  const nlohmann::json& j = parsed.value;
  if (!j.is_object() || !j.contains("weft_graph") || j["weft_graph"] != kFormatVersion) {
    WEFT_THROW("graph JSON: expected an object with \"weft_graph\": " << kFormatVersion);
  }
  if (!j.contains("nodes") || !j["nodes"].is_array() || !j.contains("outputs") ||
      !j["outputs"].is_array()) {
    WEFT_THROW("graph JSON: expected arrays \"nodes\" and \"outputs\"");
  }
  GraphBuilder g;
  std::set<std::string>
      variables;  // a graph with two variables of one name could not be saved again
  for (size_t n = 0; n < j["nodes"].size(); ++n) {
    g.nodes.push_back(ParseNode(j["nodes"][n], g, n));
    if (g.nodes.back().is_variable() && !variables.insert(g.nodes.back().name).second) {
      WEFT_THROW("graph JSON: node "
                 << n << ": expected distinct variable names, found a second variable named '"
                 << Abbreviate(g.nodes.back().name) << "'");
    }
  }
  for (size_t o = 0; o < j["outputs"].size(); ++o) {
    g.outputs.push_back(
        ParseEntry(j["outputs"][o], g, g.nodes.size(), "output " + std::to_string(o)));
  }
  if (g.outputs.empty()) WEFT_THROW("graph JSON: the graph has no outputs");
  return FromGraph(std::move(g).Freeze());
}

}  // namespace weft
