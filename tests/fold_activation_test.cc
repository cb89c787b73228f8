// The inference pass that folds an activation into the FullyConnected before it (passes/
// fold_activation.h) and the layer's activation epilogue it sets (FullyConnected's act_type): a
// folded graph computes what the unfolded one does (float32 within rounding: oneDNN's post-op is
// its own code; float64 exactly: weft's functor), only what may fold is folded, only inference
// binds fold, and a FullyConnected with an epilogue has the gradients of the layer followed by
// the activation.
#include "passes/fold_activation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "passes/fold_batch_norm.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::CountOps;

Symbol Fc(Symbol x, const std::string& name, int hidden, AttrMap attrs = {}) {
  attrs.emplace("num_hidden", std::to_string(hidden));
  return Symbol::Op("FullyConnected", {x}, attrs, name);
}

// Random arguments for `s` with data of `shape` and `dtype`.
Executor::ArrayMap Arguments(const Symbol& s, const Shape& shape, DType dtype) {
  return testing::RandomArguments(s, {{"data", shape}}, dtype);
}

std::vector<double> Infer(const Symbol& s, const Executor::ArrayMap& args, bool fold) {
  return testing::InferOutputs(s, args, "WEFT_FOLD_ACTIVATION", fold)[0];
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

struct Case {
  std::string what;
  Symbol symbol;
  Shape data;
};

std::vector<Case> FoldableCases() {
  const Symbol x = Symbol::Variable("data");
  const auto act = [&](const std::string& op, AttrMap attrs = {}) {
    return Symbol::Op(op, {Fc(x, "fc", 12)}, attrs, "act");
  };
  const Symbol conv = Symbol::Op(
      "Convolution", {x}, {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "4"}}, "conv");
  const Symbol conv_bn_relu =
      Symbol::Op("BatchNorm", {conv}, {{"act_type", "relu"}, {"fix_gamma", "false"}}, "bn");
  const Symbol mlp = Symbol::Op(
      "gelu", {Fc(Symbol::Op("gelu", {Fc(x, "fc1", 16)}, {}, "g1"), "fc2", 8)}, {}, "g2");
  return {
      {"relu", act("relu"), Shape{5, 7}},
      {"gelu", act("gelu"), Shape{5, 7}},
      {"gelu approximate tanh", act("gelu", {{"approximate", "tanh"}}), Shape{5, 7}},
      {"gelu_tanh", act("gelu_tanh"), Shape{5, 7}},
      {"Activation sigmoid", act("Activation", {{"act_type", "sigmoid"}}), Shape{5, 7}},
      {"tanh", act("tanh"), Shape{5, 7}},
      {"softrelu", act("softrelu"), Shape{5, 7}},
      {"no bias", Symbol::Op("gelu", {Fc(x, "fc", 12, {{"no_bias", "true"}})}, {}, "act"),
       Shape{5, 7}},
      {"flatten false, 3-D",
       Symbol::Op("gelu_tanh", {Fc(x, "fc", 12, {{"flatten", "false"}})}, {}, "act"),
       Shape{2, 3, 7}},
      {"a two-layer MLP", mlp, Shape{6, 9}},
      {"Convolution, relu", Symbol::Op("relu", {conv}, {}, "act"), Shape{2, 3, 6, 5}},
      {"Convolution, gelu", Symbol::Op("gelu", {conv}, {}, "act"), Shape{2, 3, 6, 5}},
  };
}

TEST(FoldActivation, FoldedGraphsComputeWhatUnfoldedOnesDo) {
  for (const Case& c : FoldableCases()) {
    SCOPED_TRACE(c.what);
    int folded = 0;
    const Graph g = FoldActivation(c.symbol.ToGraph(), &folded);
    EXPECT_EQ(folded, static_cast<int>(CountOps(c.symbol.ToGraph(), "FullyConnected") +
                                       CountOps(c.symbol.ToGraph(), "Convolution")));
    EXPECT_EQ(g.nodes().size() + folded, c.symbol.ToGraph().nodes().size()) << "one node less";
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(dtype);
      const Executor::ArrayMap args = Arguments(c.symbol, c.data, dtype);
      const double tol = dtype == DType::kFloat64 ? 1e-15 : 2e-6;  // f64: the same functor
      ExpectClose(Infer(c.symbol, args, true), Infer(c.symbol, args, false), tol);
    }
  }
}

// fold_batch_norm leaves a relu after the convolution it folds into; this pass folds that too.
TEST(FoldActivation, FoldsTheReluAFoldedBatchNormLeaves) {
  const Symbol conv =
      Symbol::Op("Convolution", {Symbol::Variable("data")},
                 {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "4"}}, "conv");
  const Symbol s = Symbol::Op("BatchNorm", {conv}, {{"act_type", "relu"}}, "bn");
  Executor::ArrayMap args = Arguments(s, Shape{2, 3, 6, 5}, DType::kFloat32);
  args.at("bn_moving_var").FillUniform(0.5, 1.5);
  const Graph bn_folded = FoldBatchNorm(s.ToGraph());
  ASSERT_EQ(CountOps(bn_folded, "relu"), 1u);
  int folded = 0;
  const Graph g = FoldActivation(bn_folded, &folded);
  EXPECT_EQ(folded, 1);
  EXPECT_EQ(CountOps(g, "relu"), 0u);
  ExpectClose(Infer(s, args, true), Infer(s, args, false), 2e-5);
}

TEST(FoldActivation, LeavesWhatItMayNotFold) {
  const Symbol x = Symbol::Variable("data");
  const Symbol fc = Fc(x, "fc", 4);
  const Symbol read_twice =
      Symbol::Group({Symbol::Op("relu", {fc}, {}, "r"), Symbol::Op("exp", {fc}, {}, "e")});
  const Symbol not_a_layer = Symbol::Op("relu", {Symbol::Op("exp", {x})}, {}, "r");
  const Symbol has_one = Symbol::Op("relu", {Fc(x, "fc", 4, {{"act_type", "tanh"}})}, {}, "r");
  const Symbol not_an_activation = Symbol::Op("exp", {fc}, {}, "e");
  for (const Symbol& s : {read_twice, not_a_layer, has_one, not_an_activation}) {
    int folded = -1;
    const Graph g = FoldActivation(s.ToGraph(), &folded);
    EXPECT_EQ(folded, 0);
    EXPECT_EQ(g.nodes().size(), s.ToGraph().nodes().size());
  }
}

TEST(FoldActivation, OnlyInferenceBindsFold) {
  const Symbol s = Symbol::Op("gelu", {Fc(Symbol::Variable("data"), "fc", 6)}, {}, "act");
  Executor::ArrayMap args = Arguments(s, Shape{3, 5}, DType::kFloat32);
  auto inference = Executor::Bind(s, Device::Cpu(), args);
  EXPECT_EQ(inference->ToDot().find("gelu"), std::string::npos) << "folded";
  Executor::ArrayMap grads = {{"fc_weight", NDArray(args.at("fc_weight").shape())}};
  auto training = Executor::Bind(s, Device::Cpu(), args, grads, {{"fc_weight", GradReq::kWrite}});
  EXPECT_NE(training->ToDot().find("gelu"), std::string::npos) << "not folded";
}

// The gradients of every argument of `s` (float64), with head gradient `head`.
std::map<std::string, std::vector<double>> Gradients(const Symbol& s,
                                                     const Executor::ArrayMap& args,
                                                     const NDArray& head) {
  Executor::ArrayMap grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, a] : args) {
    grads[name] = NDArray(a.shape(), Device::Cpu(), DType::kFloat64);
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(s, Device::Cpu(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward({head});
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, g] : grads) out[name] = g.ToVector<double>();
  return out;
}

// Each act_type's gradient reads x (gelu: the layer recomputes its output before the
// activation), y (relu, sigmoid, tanh) or nothing.
TEST(FoldActivation, AConvolutionsEpilogueHasItsGradients) {
  const Symbol x = Symbol::Variable("data");
  const AttrMap conv = {{"kernel", "(3, 3)"}, {"num_filter", "3"}, {"num_group", "3"}};
  for (const char* act : {"relu", "gelu"}) {
    SCOPED_TRACE(act);
    AttrMap with_act = conv;
    with_act["act_type"] = act;
    const Symbol epilogue = Symbol::Op("Convolution", {x}, with_act, "conv");
    const Symbol apart = Symbol::Op("Activation", {Symbol::Op("Convolution", {x}, conv, "conv")},
                                    {{"act_type", act}}, "act");
    const Executor::ArrayMap args = Arguments(epilogue, Shape{2, 3, 5, 4}, DType::kFloat64);
    NDArray head(Shape{2, 3, 3, 2}, Device::Cpu(), DType::kFloat64);
    head.FillUniform(-1, 1);
    const auto want = Gradients(apart, args, head), got = Gradients(epilogue, args, head);
    for (const auto& [name, g] : want) ExpectClose(got.at(name), g, 1e-15);
  }
}

TEST(FoldActivation, AnEpilogueHasTheGradientsOfTheLayerAndItsActivation) {
  const Symbol x = Symbol::Variable("data");
  for (const char* act : {"relu", "relu6", "sigmoid", "tanh", "softrelu", "gelu", "gelu_tanh"}) {
    SCOPED_TRACE(act);
    for (const char* no_bias : {"false", "true"}) {
      const Symbol epilogue = Fc(x, "fc", 6, {{"act_type", act}, {"no_bias", no_bias}});
      const Symbol apart = Symbol::Op("Activation", {Fc(x, "fc", 6, {{"no_bias", no_bias}})},
                                      {{"act_type", act}}, "act");
      const Executor::ArrayMap args = Arguments(epilogue, Shape{4, 5}, DType::kFloat64);
      NDArray head(Shape{4, 6}, Device::Cpu(), DType::kFloat64);
      head.FillUniform(-1, 1);
      const auto want = Gradients(apart, args, head), got = Gradients(epilogue, args, head);
      for (const auto& [name, g] : want) {
        SCOPED_TRACE(name);
        ExpectClose(got.at(name), g, 1e-15);
      }
    }
  }
}

}  // namespace
}  // namespace weft
