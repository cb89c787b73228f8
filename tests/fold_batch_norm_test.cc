// The inference pass that folds BatchNorm into the convolution before it (passes/
// fold_batch_norm.h): a bound graph with it computes what the same graph without it computes,
// within float32 rounding; it folds only what it may (a BatchNorm over channels, on a convolution
// read by nothing else), only in inference binds, and a training forward of a folded graph is an
// error.
#include "passes/fold_batch_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::CountOps;

Symbol ConvBn(Symbol x, const std::string& name, const AttrMap& conv, const AttrMap& bn) {
  AttrMap c = conv;
  c.emplace("kernel", "(3, 3)");
  c.emplace("pad", "(1, 1)");
  c.emplace("num_filter", "6");
  x = Symbol::Op("Convolution", {x}, c, name + "_conv");
  return Symbol::Op("BatchNorm", {x}, bn, name + "_bn");
}

// Random arguments for `s` with data of `data` (default (2, 3, 7, 7)); running variances and
// scales positive.
Executor::ArrayMap Arguments(const Symbol& s, const Shape& data = Shape{2, 3, 7, 7}) {
  Executor::ArrayMap args = testing::RandomArguments(s, {{"data", data}});
  for (auto& [name, array] : args) {
    if (name.find("moving_var") != std::string::npos || name.find("gamma") != std::string::npos)
      array.FillUniform(0.5, 1.5);
  }
  return args;
}

std::vector<double> Infer(const Symbol& s, const Executor::ArrayMap& args, bool fold) {
  return testing::InferOutputs(s, args, "WEFT_FOLD_BATCH_NORM", fold)[0];
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(FoldBatchNorm, FoldedGraphsComputeWhatUnfoldedOnesDo) {
  const Symbol data = Symbol::Variable("data");
  const std::vector<std::pair<std::string, Symbol>> cases = {
      {"no bias", ConvBn(data, "a", {{"no_bias", "true"}}, {})},
      {"bias", ConvBn(data, "a", {}, {})},
      {"fix_gamma, relu", ConvBn(data, "a", {}, {{"fix_gamma", "true"}, {"act_type", "relu"}})},
      {"grouped, strided",
       ConvBn(data, "a", {{"num_group", "3"}, {"stride", "(2, 2)"}}, {{"eps", "0.01"}})},
      {"a chain", ConvBn(ConvBn(data, "a", {}, {{"act_type", "relu"}}), "b", {}, {})},
  };
  for (const auto& [what, s] : cases) {
    SCOPED_TRACE(what);
    int folded = 0;
    const Graph g = FoldBatchNorm(s.ToGraph(), &folded);
    EXPECT_EQ(folded, static_cast<int>(CountOps(s.ToGraph(), "BatchNorm")));
    EXPECT_EQ(CountOps(g, "BatchNorm"), 0u);
    const Executor::ArrayMap args = Arguments(s);
    ExpectClose(Infer(s, args, true), Infer(s, args, false));
  }
}

// A channels-last convolution's channels are its last axis: a BatchNorm over axis 3 (or -1)
// folds into it, one over axis 1 (the rows there) does not.
TEST(FoldBatchNorm, FoldsOverAChannelsLastConvolutionsLastAxisOnly) {
  const Symbol data = Symbol::Variable("data");
  const AttrMap nhwc = {{"layout", "NHWC"}};
  for (const char* axis : {"3", "-1"}) {
    SCOPED_TRACE(axis);
    const Symbol s = ConvBn(data, "a", nhwc, {{"axis", axis}});
    int folded = 0;
    EXPECT_EQ(CountOps(FoldBatchNorm(s.ToGraph(), &folded), "BatchNorm"), 0u);
    EXPECT_EQ(folded, 1);
    const Executor::ArrayMap args = Arguments(s, Shape{2, 7, 7, 3});
    ExpectClose(Infer(s, args, true), Infer(s, args, false));
  }
  int folded = -1;
  const Graph rows = FoldBatchNorm(ConvBn(data, "a", nhwc, {{"axis", "1"}}).ToGraph(), &folded);
  EXPECT_EQ(folded, 0);
  EXPECT_EQ(CountOps(rows, "BatchNorm"), 1u);
}

TEST(FoldBatchNorm, LeavesWhatItMayNotFold) {
  const Symbol data = Symbol::Variable("data");
  const Symbol conv =
      Symbol::Op("Convolution", {data}, {{"kernel", "(3, 3)"}, {"num_filter", "4"}}, "conv");
  const Symbol read_twice = Symbol::Group(
      {Symbol::Op("BatchNorm", {conv}, {}, "bn"), Symbol::Op("relu", {conv}, {}, "r")});
  const Symbol other_axis = Symbol::Op("BatchNorm", {conv}, {{"axis", "-1"}}, "bn");
  const Symbol not_conv = Symbol::Op("BatchNorm", {Symbol::Op("relu", {data})}, {}, "bn");
  for (const Symbol& s : {read_twice, other_axis, not_conv}) {
    int folded = -1;
    const Graph g = FoldBatchNorm(s.ToGraph(), &folded);
    EXPECT_EQ(folded, 0);
    EXPECT_EQ(CountOps(g, "BatchNorm"), 1u);
  }
}

TEST(FoldBatchNorm, OnlyInferenceBindsFoldAndTheyCannotTrain) {
  const Symbol s = ConvBn(Symbol::Variable("data"), "a", {}, {});
  Executor::ArrayMap args = Arguments(s);
  auto inference = Executor::Bind(s, Device::Cpu(), args);
  EXPECT_EQ(inference->ToDot().find("BatchNorm"), std::string::npos) << "folded";
  testing::ExpectErrorContains(
      [&] { inference->Forward(/*is_train=*/true); },
      {"a training forward of a graph bound for inference", "WEFT_FOLD_BATCH_NORM=0"});
  Executor::ArrayMap grads = {{"a_conv_weight", NDArray(args.at("a_conv_weight").shape())}};
  auto training =
      Executor::Bind(s, Device::Cpu(), args, grads, {{"a_conv_weight", GradReq::kWrite}});
  EXPECT_NE(training->ToDot().find("BatchNorm"), std::string::npos) << "not folded";
  training->Forward(/*is_train=*/true);
  training->Backward();
  EXPECT_NO_THROW(args.at("a_bn_moving_mean").WaitToRead());
}

// The folded weight and bias depend only on parameters (passes/stable_nodes.h): a CPU inference
// executor computes them at its first Forward, skips them while no parameter changes (fewer engine
// ops, the same outputs), and computes them again when one does: its outputs then equal a fresh
// executor's on the new values. The engine stamps every write it is pushed, so a parameter written
// through any pushed op (here FillUniform) is seen.
TEST(FoldBatchNorm, FoldedWeightsAreComputedOnceAndAgainWhenAParameterChanges) {
  const Symbol s = ConvBn(ConvBn(Symbol::Variable("data"), "a", {}, {}), "b", {}, {});
  Executor::ArrayMap args = Arguments(s);
  auto exec = Executor::Bind(s, Device::Cpu(), args);
  const auto run = [&] {
    exec->Forward(/*is_train=*/false);
    return std::make_pair(exec->outputs()[0].ToVector<float>(), exec->stats().engine_ops_pushed);
  };
  const auto [first, first_ops] = run();
  const auto [second, second_ops] = run();
  EXPECT_EQ(second, first);
  EXPECT_LT(second_ops, first_ops) << "the folded weights are not computed again";
  {
    testing::ScopedEnv off("WEFT_KEEP_STABLE", "0");
    auto every_time = Executor::Bind(s, Device::Cpu(), args);
    every_time->Forward(/*is_train=*/false);
    const size_t ops = every_time->stats().engine_ops_pushed;
    every_time->Forward(/*is_train=*/false);
    EXPECT_EQ(every_time->stats().engine_ops_pushed, ops) << "WEFT_KEEP_STABLE=0 skips nothing";
    EXPECT_EQ(every_time->outputs()[0].ToVector<float>(), first);
  }
  const auto fresh = [&] {
    auto other = Executor::Bind(s, Device::Cpu(), args);
    other->Forward(/*is_train=*/false);
    return other->outputs()[0].ToVector<float>();
  };
  for (const char* changed : {"b_bn_gamma", "a_bn_moving_var", "a_conv_weight"}) {
    SCOPED_TRACE(changed);
    args.at(changed).FillUniform(0.5, 1.5);
    const auto [after, after_ops] = run();
    EXPECT_NE(after, first);
    EXPECT_EQ(after, fresh());
    EXPECT_EQ(run().first, after);
  }
}

}  // namespace
}  // namespace weft
