// graph/: symbols compose, list their arguments and outputs, freeze into the IR, and their JSON
// form round-trips exactly; malformed JSON is rejected with an error that says what is wrong.
#include <gtest/gtest.h>

#include "core/error.h"
#include "graph/symbol.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

Symbol Mlp() {
  Symbol x = Symbol::Variable("data");
  Symbol h = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "16"}}, "fc1");
  Symbol a = Symbol::Op("relu", {h}, {}, "relu1");
  Symbol y = Symbol::Op("FullyConnected", {a}, {{"num_hidden", "4"}}, "fc2");
  return Symbol::Op("SoftmaxCrossEntropy", {y, Symbol::Variable("label")}, {}, "loss");
}

TEST(Symbol, ComposesAndListsArgumentsInOrder) {
  Symbol loss = Mlp();
  EXPECT_EQ(loss.ListArguments(),
            (std::vector<std::string>{"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "label"}));
  EXPECT_EQ(loss.ListOutputs(), std::vector<std::string>{"loss_output"});
  Graph g = loss.ToGraph();
  EXPECT_EQ(g.nodes().size(), 10u);
  EXPECT_EQ(g.outputs().size(), 1u);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    for (const NodeEntry& e : g.node(n).inputs) EXPECT_LT(e.node, n) << "inputs come before their users";
  }
}

TEST(Symbol, GroupsAndSelectsOutputs) {
  Symbol x = Symbol::Variable("x");
  Symbol d = Symbol::Op("Dropout", {x}, {{"p", "0.5"}}, "drop");
  EXPECT_EQ(d.num_outputs(), 2u);
  Symbol both = Symbol::Group({Symbol::Op("relu", {d[0]}, {}, "r"), Symbol::Op("exp", {x}, {}, "e")});
  EXPECT_EQ(both.ListOutputs(), (std::vector<std::string>{"r_output", "e_output"}));
  EXPECT_EQ(both.ListArguments(), std::vector<std::string>{"x"});
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::Op("relu", {d}); }).find("has 2 outputs"), std::string::npos);
}

TEST(Symbol, JsonRoundTripsExactly) {
  Symbol loss = Mlp();
  const std::string json = loss.ToJson();
  Symbol loaded = Symbol::FromJson(json);
  EXPECT_EQ(loaded.ToJson(), json);
  EXPECT_EQ(loaded.ListArguments(), loss.ListArguments());
  Graph a = loss.ToGraph(), b = loaded.ToGraph();
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t n = 0; n < a.nodes().size(); ++n) {
    EXPECT_EQ(a.node(n).name, b.node(n).name);
    EXPECT_EQ(a.node(n).op, b.node(n).op);
    EXPECT_EQ(a.node(n).attrs.raw(), b.node(n).attrs.raw());
    EXPECT_TRUE(a.node(n).inputs == b.node(n).inputs);
  }
}

TEST(Symbol, MalformedJsonIsAClearError) {
  EXPECT_NE(testing::ErrorMessage([] { Symbol::FromJson("{not json"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(testing::ErrorMessage([] { Symbol::FromJson(R"({"nodes": [], "outputs": []})"); }).find("weft_graph"),
            std::string::npos);
  const std::string cycle = R"({"weft_graph": 1, "nodes": [
      {"op": "null", "name": "x", "inputs": []},
      {"op": "relu", "name": "r", "inputs": [[2, 0]]},
      {"op": "relu", "name": "s", "inputs": [[1, 0]]}], "outputs": [[2, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] {
              Symbol::FromJson(cycle);
            }).find("refers to node 2, expected a node defined before it"),
            std::string::npos);
  const std::string unknown = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"},
      {"op": "rleu", "name": "r", "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(unknown); }).find("unknown op 'rleu'"), std::string::npos);
  const std::string bad_attr = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"},
      {"op": "Activation", "name": "a", "attrs": {"act_type": "swish"}, "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(bad_attr); }).find("'swish'"), std::string::npos);
  const std::string missing_input = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"},
      {"op": "add", "name": "a", "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(missing_input); }).find("expected 2 input(s), found 1"),
            std::string::npos);
  const std::string bad_output = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}], "outputs": [[0, 3]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(bad_output); }).find("found output 3"), std::string::npos);
}

TEST(Graph, FreezeChecksThatInputsComeBeforeTheirUsers) {
  GraphBuilder b = Mlp().ToGraph().ToBuilder();
  b.nodes[1].inputs.push_back({9, 0});  // fc1 reading the loss
  EXPECT_NE(testing::ErrorMessage([&] { std::move(b).Freeze(); }).find("reads node 9, expected a node before it"),
            std::string::npos);
  GraphBuilder bad_output = Mlp().ToGraph().ToBuilder();
  bad_output.outputs.push_back({0, 1});  // a variable has one output
  EXPECT_NE(
      testing::ErrorMessage([&] { std::move(bad_output).Freeze(); }).find("reads a missing output of node 'data'"),
      std::string::npos);
}

TEST(Graph, TypedAttributesComeWithANewGraphValue) {
  const Graph g = Mlp().ToGraph();
  const Graph typed =
      g.WithTypes(std::vector<Shape>(g.num_entries(), Shape{2}), std::vector<DType>(g.num_entries(), DType::kFloat64));
  EXPECT_FALSE(g.has_types()) << "the original is unchanged";
  EXPECT_TRUE(typed.has_types());
  EXPECT_EQ(typed.dtypes()[typed.EntryId(typed.outputs()[0])], DType::kFloat64);
  EXPECT_EQ(&typed.nodes(), &g.nodes()) << "both share one frozen structure";
  EXPECT_NE(testing::ErrorMessage([&] { g.shapes(); }).find("run InferShapesAndTypes first"), std::string::npos);
  EXPECT_NE(testing::ErrorMessage([&] { typed.memory(); }).find("run PlanMemory first"), std::string::npos);
  EXPECT_NE(testing::ErrorMessage([&] { g.WithTypes({Shape{1}}, {DType::kFloat32}); }).find("one shape per entry"),
            std::string::npos);
}

TEST(Symbol, TwoVariablesWithOneNameAreRejected) {
  Symbol a = Symbol::Variable("x"), b = Symbol::Variable("x");
  EXPECT_NE(testing::ErrorMessage([&] {
              Symbol::Op("add", {a, b}).ToGraph();
            }).find("two different variables are named 'x'"),
            std::string::npos);
}

}  // namespace
}  // namespace weft
