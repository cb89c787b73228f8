// Symbol: builds graphs by composing ops. A symbol is a list of outputs of shared nodes; composing
// creates new nodes that point at existing ones, so symbols are cheap to copy and never change.
// ToGraph() freezes one into the IR (graph.h); ToJson()/FromJson() save and load it exactly.
//
//   Symbol x = Symbol::Variable("data");
//   Symbol h = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "128"}}, "fc1");  // adds
//   fc1_weight, fc1_bias Symbol y = Symbol::Op("relu", {h}); y.ListArguments() == {"data",
//   "fc1_weight", "fc1_bias"} Symbol both = Symbol::Group({h, y});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/attrs.h"

namespace weft {

class Symbol {
 public:
  Symbol() = default;

  static Symbol Variable(const std::string& name);
  // A node running `op` on the given inputs (each a single-output symbol). Inputs the op needs
  // and that are not given become variables named "<name>_<input name>" (e.g. fc1_weight).
  // An empty name is replaced by "<op><n>".
  static Symbol Op(const std::string& op, const std::vector<Symbol>& inputs,
                   const AttrMap& attrs = {}, const std::string& name = "");
  static Symbol Group(const std::vector<Symbol>& symbols);

  size_t num_outputs() const { return outputs_.size(); }
  Symbol operator[](size_t output) const;  // one output of a multi-output symbol
  // The names of the variables, in the order a depth-first walk from the outputs meets them.
  std::vector<std::string> ListArguments() const;
  std::vector<std::string> ListOutputs() const;  // "<node>_output", or "<node>_output<i>" for i > 0

  Graph ToGraph() const;
  static Symbol FromGraph(const Graph& graph);
  std::string ToJson() const;
  // Throws weft::Error saying what is wrong with the text (not JSON, nested deeper than 8 levels,
  // unknown op, an input that refers to a node not defined before it, whatever the id's width, a
  // bad attribute, ...), quoting a few dozen bytes of a bad value at most. Destroying a symbol,
  // like every walk of its graph, is iterative: chains of any length are fine.
  static Symbol FromJson(const std::string& json);

 private:
  struct SymNode;
  struct SymEntry {
    std::shared_ptr<const SymNode> node;
    uint32_t index = 0;
  };
  std::vector<SymEntry> outputs_;
};

}  // namespace weft
