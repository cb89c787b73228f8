// graph/: symbols compose, list their arguments and outputs, freeze into the IR, and their JSON
// form round-trips exactly; malformed JSON is rejected with an error that says what is wrong. A
// rewrite renumbers what names nodes; strongly connected components are found.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "graph/rewrite.h"
#include "graph/strongly_connected.h"
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
  EXPECT_EQ(loss.ListArguments(), (std::vector<std::string>{"data", "fc1_weight", "fc1_bias",
                                                            "fc2_weight", "fc2_bias", "label"}));
  EXPECT_EQ(loss.ListOutputs(), std::vector<std::string>{"loss_output"});
  Graph g = loss.ToGraph();
  EXPECT_EQ(g.nodes().size(), 10u);
  EXPECT_EQ(g.outputs().size(), 1u);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    for (const NodeEntry& e : g.node(n).inputs)
      EXPECT_LT(e.node, n) << "inputs come before their users";
  }
}

TEST(Symbol, GroupsAndSelectsOutputs) {
  Symbol x = Symbol::Variable("x");
  Symbol pair = Symbol::Group({Symbol::Op("exp", {x}, {}, "e1"), Symbol::Op("tanh", {x}, {}, "t")});
  EXPECT_EQ(pair.num_outputs(), 2u);
  Symbol both =
      Symbol::Group({Symbol::Op("relu", {pair[1]}, {}, "r"), Symbol::Op("exp", {x}, {}, "e")});
  EXPECT_EQ(both.ListOutputs(), (std::vector<std::string>{"r_output", "e_output"}));
  EXPECT_EQ(both.ListArguments(), std::vector<std::string>{"x"});
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::Op("relu", {pair}); }).find("has 2 outputs"),
            std::string::npos);
}

TEST(Symbol, ADropoutFeedsALayerAsUsersWriteIt) {
  // One visible output, as in MXNet and PyTorch; its mask is the op's own, for the backward.
  Symbol d = Symbol::Op("Dropout", {Symbol::Variable("x")}, {{"p", "0.5"}}, "drop");
  EXPECT_EQ(d.num_outputs(), 1u);
  Symbol fc = Symbol::Op("FullyConnected", {d}, {{"num_hidden", "3"}}, "fc");
  EXPECT_EQ(fc.ListArguments(), (std::vector<std::string>{"x", "fc_weight", "fc_bias"}));
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
  EXPECT_NE(testing::ErrorMessage([] { Symbol::FromJson("{not json"); }).find("invalid JSON"),
            std::string::npos);
  EXPECT_NE(testing::ErrorMessage([] {
              Symbol::FromJson(R"({"nodes": [], "outputs": []})");
            }).find("weft_graph"),
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
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(unknown); }).find("unknown op 'rleu'"),
            std::string::npos);
  const std::string bad_attr = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"},
      {"op": "Activation", "name": "a", "attrs": {"act_type": "swish"}, "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(bad_attr); }).find("'swish'"),
            std::string::npos);
  const std::string missing_input = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"},
      {"op": "add", "name": "a", "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] {
              Symbol::FromJson(missing_input);
            }).find("expected 2 input(s), found 1"),
            std::string::npos);
  const std::string bad_output =
      R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}], "outputs": [[0, 3]]})";
  EXPECT_NE(testing::ErrorMessage([&] { Symbol::FromJson(bad_output); }).find("found output 3"),
            std::string::npos);
}

TEST(Graph, FreezeChecksThatInputsComeBeforeTheirUsers) {
  GraphBuilder b = Mlp().ToGraph().ToBuilder();
  b.nodes[1].inputs.push_back({9, 0});  // fc1 reading the loss
  EXPECT_NE(testing::ErrorMessage([&] {
              std::move(b).Freeze();
            }).find("reads node 9, expected a node before it"),
            std::string::npos);
  GraphBuilder bad_output = Mlp().ToGraph().ToBuilder();
  bad_output.outputs.push_back({0, 1});  // a variable has one output
  EXPECT_NE(testing::ErrorMessage([&] {
              std::move(bad_output).Freeze();
            }).find("reads a missing output of node 'data'"),
            std::string::npos);
}

TEST(Graph, TypedAttributesComeWithANewGraphValue) {
  const Graph g = Mlp().ToGraph();
  const Graph typed = g.WithTypes(std::vector<Shape>(g.num_entries(), Shape{2}),
                                  std::vector<DType>(g.num_entries(), DType::kFloat64));
  EXPECT_FALSE(g.has_types()) << "the original is unchanged";
  EXPECT_TRUE(typed.has_types());
  EXPECT_EQ(typed.dtypes()[typed.EntryId(typed.outputs()[0])], DType::kFloat64);
  EXPECT_EQ(&typed.nodes(), &g.nodes()) << "both share one frozen structure";
  EXPECT_NE(testing::ErrorMessage([&] { g.shapes(); }).find("run InferShapesAndTypes first"),
            std::string::npos);
  EXPECT_NE(testing::ErrorMessage([&] { typed.memory(); }).find("run PlanMemory first"),
            std::string::npos);
  EXPECT_NE(testing::ErrorMessage([&] {
              g.WithTypes({Shape{1}}, {DType::kFloat32});
            }).find("one shape per entry"),
            std::string::npos);
}

TEST(Graph, RenumberMovesInputsOutputsHeadGradientsForwardNodesAndTypes) {
  // Nodes: 0 x, 1 exp(x), 2 head gradient variable, 3 backward of 1 (reads 2 and 1).
  GraphBuilder b;
  b.nodes.push_back(Node{nullptr, "x", {}, {}, -1});
  const Op& exp = GetOp("exp");
  b.nodes.push_back(Node{&exp, "e", ParseAttrs(exp, {}), {{0, 0}}, -1});
  b.nodes.push_back(Node{nullptr, "e_head_grad", {}, {}, -1});
  const Op& mul = GetOp("mul");
  b.nodes.push_back(Node{&mul, "e_backward", ParseAttrs(mul, {}), {{2, 0}, {1, 0}}, 1});
  b.outputs = {{1, 0}, {3, 0}};
  b.num_forward_outputs = 1;
  b.head_grads = {2};
  const Graph g = std::move(b).Freeze().WithTypes(
      {Shape{1}, Shape{2}, Shape{3}, Shape{4}},
      {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kBFloat16});
  const Graph r = Renumber(g, {2, 0, 1, 3});
  EXPECT_EQ(r.node(0).name, "e_head_grad");
  EXPECT_EQ(r.head_grads(), std::vector<uint32_t>{0});
  EXPECT_EQ(r.node(2).inputs[0], (NodeEntry{1, 0}));
  EXPECT_EQ(r.node(3).inputs[0], (NodeEntry{0, 0}));
  EXPECT_EQ(r.node(3).forward_node, 2);
  EXPECT_EQ(r.outputs(), (std::vector<NodeEntry>{{2, 0}, {3, 0}}));
  EXPECT_EQ(r.num_forward_outputs(), 1u);
  EXPECT_EQ(r.shapes(), (std::vector<Shape>{Shape{3}, Shape{1}, Shape{2}, Shape{4}}));
  EXPECT_EQ(r.dtypes()[0], DType::kInt32);
  EXPECT_NE(testing::ErrorMessage([&] {
              Renumber(g, {0, 2, 3});
            }).find("output 0 of node 'e'"),
            std::string::npos)
      << "a kept node reads a dropped one";
  EXPECT_NE(testing::ErrorMessage([&] {
              Renumber(g, {0, 1, 3});
            }).find("'e_head_grad'"),
            std::string::npos);
}

TEST(StronglyConnectedComponents, FindsEachCycleOnceSinksFirst) {
  // 0 -> 1 -> 2 -> 0 and 2 -> 3 -> 4 -> 3; 5 alone with a self edge; 6 -> 0.
  const auto components = StronglyConnectedComponents({{1}, {2}, {0, 3}, {4}, {3}, {5}, {0}});
  ASSERT_EQ(components.size(), 4u);
  auto sorted = [](std::vector<uint32_t> c) {
    std::sort(c.begin(), c.end());
    return c;
  };
  EXPECT_EQ(sorted(components[0]), (std::vector<uint32_t>{3, 4})) << "reached from 2: listed first";
  EXPECT_EQ(sorted(components[1]), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(sorted(components[2]), std::vector<uint32_t>{5});
  EXPECT_EQ(sorted(components[3]), std::vector<uint32_t>{6});
  EXPECT_TRUE(StronglyConnectedComponents({}).empty());
  EXPECT_NE(testing::ErrorMessage([] {
              StronglyConnectedComponents({{0, 7}});
            }).find("vertex 0 has an edge to 7, which is not a vertex"),
            std::string::npos);
}

TEST(StronglyConnectedComponents, ALongChainNeedsNoRecursion) {
  std::vector<std::vector<uint32_t>> next(1 << 20);
  for (uint32_t v = 0; v + 1 < next.size(); ++v) next[v] = {v + 1};
  next.back() = {0};  // one cycle through every vertex
  const auto components = StronglyConnectedComponents(next);
  ASSERT_EQ(components.size(), 1u);
  EXPECT_EQ(components[0].size(), next.size());
}

TEST(Symbol, TwoVariablesWithOneNameAreRejected) {
  Symbol a = Symbol::Variable("x"), b = Symbol::Variable("x");
  EXPECT_NE(testing::ErrorMessage([&] {
              Symbol::Op("add", {a, b}).ToGraph();
            }).find("two different variables are named 'x'"),
            std::string::npos);
}

// A message quotes at most a few dozen bytes of the input, however large the bad value.
constexpr size_t kMaxMessageBytes = 600;

// x, then relu nodes each reading the one before; the last is the output.
std::string ReluChainJson(size_t relus) {
  std::string json = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x", "inputs": []})";
  for (size_t n = 1; n <= relus; ++n) {
    json += R"(, {"op": "relu", "name": "r)" + std::to_string(n) + R"(", "inputs": [[)" +
            std::to_string(n - 1) + ", 0]]}";
  }
  return json + R"(], "outputs": [[)" + std::to_string(relus) + ", 0]]}";
}

TEST(Symbol, JsonIdsPastTheGraphAreErrorsWhateverTheirWidth) {
  // x, y, and a relu whose input is `entry`.
  const auto graph = [](const std::string& entry) {
    const std::string inputs =
        R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}, {"op": "null", "name": "y"})";
    return inputs + R"(, {"op": "relu", "name": "r", "inputs": [)" + entry +
           R"(]}], "outputs": [[2, 0]]})";
  };
  for (const std::string node :
       {"4294967297", "4294967296", "18446744073709551615", "1099511627777"}) {
    SCOPED_TRACE(node);
    const std::string m =
        testing::ErrorMessage([&] { Symbol::FromJson(graph("[" + node + ", 0]")); });
    EXPECT_NE(m.find("refers to node " + node + ", expected a node defined before it (0..1)"),
              std::string::npos)
        << m;
  }
  for (const std::string index : {"4294967296", "4294967297"}) {
    SCOPED_TRACE(index);
    const std::string m =
        testing::ErrorMessage([&] { Symbol::FromJson(graph("[1, " + index + "]")); });
    EXPECT_NE(m.find("node 'y' has 1 output(s), found output " + index), std::string::npos) << m;
  }
  const std::string bad_output = R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}],
      "outputs": [[4294967296, 0]]})";
  EXPECT_NE(testing::ErrorMessage([&] {
              Symbol::FromJson(bad_output);
            }).find("refers to node 4294967296"),
            std::string::npos);
}

TEST(Symbol, DeeplyNestedJsonIsRefusedWithoutRecursion) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::vector<std::string> texts = {
      deep,
      R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x", "inputs": )" + deep +
          R"(}], "outputs": [[0, 0]]})",
      R"({"weft_graph": 1, "nodes": [], "outputs": [[0, 0]], "extra": )" + deep + "}",
  };
  for (const std::string& text : texts) {
    const std::string m = testing::ErrorMessage([&] { Symbol::FromJson(text); });
    EXPECT_NE(m.find("nested deeper than"), std::string::npos) << m.substr(0, 1000);
    EXPECT_LT(m.size(), kMaxMessageBytes) << m.substr(0, 1000);
  }
}

// x, then a node {"op": <op_and_attrs>, "name": "n", "inputs": [[0, 0]]}, the output.
std::string OneOpGraph(const std::string& op_and_attrs) {
  return R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}, {"op": )" + op_and_attrs +
         R"(, "name": "n", "inputs": [[0, 0]]}], "outputs": [[1, 0]]})";
}

TEST(Symbol, JsonMessagesQuoteAtMostAFewDozenBytes) {
  const std::string big(1'000'000, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a huge entry",
       R"({"weft_graph": 1, "nodes": [{"op": "null", "name": "x"}], "outputs": [[")" + big +
           R"("]]})"},
      {"a huge op name",
       R"({"weft_graph": 1, "nodes": [{"op": ")" + big + R"(", "name": "x"}], "outputs": []})"},
      {"a huge attribute value",
       OneOpGraph(R"("FullyConnected", "attrs": {"num_hidden": ")" + big + R"("})")},
      {"a huge attribute name", OneOpGraph(R"("relu", "attrs": {")" + big + R"(": "1"})")},
      {"a huge node name", R"({"weft_graph": 1, "nodes": [{"op": "null", "name": ")" + big +
                               R"("}], "outputs": [[0, 1]]})"},
      {"a huge string left open", R"({"weft_graph": 1, "nodes": [{"op": ")" + big},
  };
  for (const auto& [what, text] : cases) {
    SCOPED_TRACE(what);
    const std::string m = testing::ErrorMessage([&] { Symbol::FromJson(text); });
    EXPECT_NE(m.find("graph JSON"), std::string::npos) << m.substr(0, 1000);
    EXPECT_LT(m.size(), kMaxMessageBytes) << m.substr(0, 1000);
  }
}

TEST(Symbol, AttributeErrorsQuoteAtMostAFewDozenBytesOfTheValue) {
  const std::string big(10'000'000, '7');
  const Symbol x = Symbol::Variable("x");
  const std::vector<std::string> messages = {
      testing::ErrorMessage([&] {
        Symbol::Op("FullyConnected", {x}, {{"num_hidden", big}});
      }),
      testing::ErrorMessage([&] {
        Symbol::Op("relu", {x}, {{"unknown", big}});
      }),
      testing::ErrorMessage([&] {
        Symbol::Op("relu", {x}, {{big, "1"}});
      }),
      testing::ErrorMessage([&] {
        Symbol::Op("Activation", {x}, {{"act_type", big}});
      }),
      testing::ErrorMessage([&] {
        Symbol::Op("Dropout", {x}, {{"p", big + "x"}});
      }),
  };
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("(10000"), std::string::npos)
        << "says how long the value was: " << m.substr(0, 1000);
    EXPECT_LT(m.size(), kMaxMessageBytes) << m.substr(0, 1000);
  }
}

// Symbols share their nodes; the last owner of a long chain releases it without one stack frame
// per node. 100,000 nodes on a 1 MB stack (recursion would need under 11 bytes a node), and a
// chain of 20,000 loaded from JSON on 256 KB (under 14 bytes a node).
TEST(Symbol, ALongChainIsBuiltConvertedAndDestroyedWithoutRecursion) {
  constexpr size_t kNodes = 100'000, kLoadedNodes = 20'000;
  testing::RunOnSmallStack(1 << 20, [&] {
    Symbol y = Symbol::Variable("x");
    for (size_t n = 0; n < kNodes; ++n) y = Symbol::Op("relu", {y}, {}, "r" + std::to_string(n));
    const Graph g = y.ToGraph();
    EXPECT_EQ(g.nodes().size(), kNodes + 1);
    Symbol copy = Symbol::FromGraph(g);
    y = Symbol();  // copy and g still hold nodes
    EXPECT_EQ(copy.ListOutputs(),
              std::vector<std::string>{"r" + std::to_string(kNodes - 1) + "_output"});
  });
  testing::RunOnSmallStack(256 << 10, [&] {
    Symbol loaded = Symbol::FromJson(ReluChainJson(kLoadedNodes));
    EXPECT_EQ(loaded.ListOutputs(),
              std::vector<std::string>{"r" + std::to_string(kLoadedNodes) + "_output"});
  });
}

}  // namespace
}  // namespace weft
