// The CPU inference pass that runs convolutions and poolings channels last (passes/
// channels_last.h): the converted graph computes what the NCHW graph computes (float32 within
// rounding, float64 to its last bits' rounding), with one transpose into NHWC where a chain of
// window ops and layout-blind ops begins and one back where NCHW is read again (each made once
// per value), and only CPU inference binds convert.
#include "passes/channels_last.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;
using testing::CountOps;

// The window ops of g with layout NHWC.
size_t CountChannelsLast(const Graph& g) {
  return std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) {
    return n.op != nullptr && (n.op->name == "Convolution" || n.op->name == "Pooling") &&
           n.attrs.raw().count("layout") != 0 && n.attrs.raw().at("layout") == "NHWC";
  });
}

Symbol Conv(Symbol x, const std::string& name, int filters, AttrMap attrs = {}) {
  attrs.emplace("kernel", "(3, 3)");
  attrs.emplace("pad", "(1, 1)");
  attrs.emplace("num_filter", std::to_string(filters));
  return Symbol::Op("Convolution", {x}, attrs, name);
}

// A residual network's shape: a stem, a block whose sum joins two convolutions' paths, pooling,
// a global average and a dense layer (read through flatten, which needs NCHW).
Symbol ResidualNet() {
  const Symbol data = Symbol::Variable("data");
  const Symbol stem = Conv(data, "stem", 8, {{"act_type", "relu"}});
  const Symbol a = Conv(stem, "a", 8, {{"act_type", "relu"}});
  const Symbol b = Conv(a, "b", 8);
  const Symbol sum = Symbol::Op("relu", {Symbol::Op("add", {b, stem})}, {}, "sum");
  const Symbol pool = Symbol::Op("Pooling", {sum}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}});
  const Symbol six = Symbol::Op("clip", {pool}, {{"a_min", "0"}, {"a_max", "6"}});
  const Symbol global =
      Symbol::Op("Pooling", {six}, {{"global_pool", "true"}, {"pool_type", "avg"}}, "gap");
  return Symbol::Op("FullyConnected", {Symbol::Op("flatten", {global})}, {{"num_hidden", "5"}},
                    "fc");
}

Executor::ArrayMap Arguments(const Symbol& s, const Shape& data, DType dtype) {
  return testing::RandomArguments(s, {{"data", data}}, dtype);
}

std::vector<std::vector<double>> Infer(const Symbol& s, const Executor::ArrayMap& args, bool last) {
  return testing::InferOutputs(s, args, "WEFT_CHANNELS_LAST", last);
}

void ExpectSame(const Symbol& s, const Shape& data, DType dtype, double tol) {
  const Executor::ArrayMap args = Arguments(s, data, dtype);
  const auto want = Infer(s, args, false), got = Infer(s, args, true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    for (size_t i = 0; i < got[o].size(); ++i)
      ASSERT_NEAR(got[o][i], want[o][i], tol * (1 + std::abs(want[o][i]))) << o << ", " << i;
  }
}

TEST(ChannelsLast, AResidualNetworkRunsChannelsLastBetweenOneTransposeInAndOneOut) {
  const Symbol net = ResidualNet();
  int converted = 0;
  const Graph g = ChannelsLast(net.ToGraph(), &converted);
  EXPECT_EQ(converted, 5);  // three convolutions, two poolings
  EXPECT_EQ(CountChannelsLast(g), 5u);
  EXPECT_EQ(CountOps(g, "transpose"), 2u);  // the data in; the global average out to flatten
  ExpectSame(net, Shape{2, 3, 9, 9}, DType::kFloat32, 2e-5);
  ExpectSame(net, Shape{2, 3, 9, 9}, DType::kFloat64, 1e-12);
}

TEST(ChannelsLast, AValueReadInBothLayoutsIsTransposedOnceEachWay) {
  const Symbol data = Symbol::Variable("data");
  const Symbol a = Conv(data, "a", 4);
  // a feeds a convolution (NHWC), a reshape and a sum with data (NCHW readers) and is an output
  const Symbol b = Conv(a, "b", 4);
  const Symbol r = Symbol::Op("reshape", {a}, {{"shape", "(0, -1)"}}, "r");
  const Symbol plus = Symbol::Op("add", {a, data}, {}, "plus");
  const Symbol s = Symbol::Group({b, r, plus, a});
  const Graph g = ChannelsLast(s.ToGraph());
  // data into NHWC once (for a, and for plus, which then runs NHWC too); back: a once (reshape
  // and the output), plus and b (outputs)
  EXPECT_EQ(CountOps(g, "transpose"), 4u);
  const BindResult bound = BindCpu(s, Shape{2, 4, 5, 6});
  const std::vector<Shape>& shapes = bound.graph.shapes();
  EXPECT_EQ(shapes[bound.graph.EntryId(bound.graph.outputs()[0])], (Shape{2, 4, 5, 6}));
  EXPECT_EQ(shapes[bound.graph.EntryId(bound.graph.outputs()[3])], (Shape{2, 4, 5, 6}));
  EXPECT_EQ(bound.graph.node(bound.graph.outputs()[3].node).name, "a");  // the output's name
  ExpectSame(s, Shape{2, 4, 5, 6}, DType::kFloat32, 2e-5);
}

// A broadcast operand of another rank or layout (a (C, 1, 1) bias) is read in NCHW: the sum is
// not layout blind for it, so the convolution's output goes back first.
TEST(ChannelsLast, ABroadcastWithAnNchwOperandReadsNchw) {
  const Symbol data = Symbol::Variable("data");
  const Symbol bias = Symbol::Variable("bias");
  const Symbol s = Symbol::Op("add", {Conv(data, "a", 4), bias}, {}, "biased");
  const Graph g = ChannelsLast(s.ToGraph());
  EXPECT_EQ(CountOps(g, "transpose"), 2u);
  const Executor::ArrayMap given = {
      {"bias", NDArray::FromVector(std::vector<float>{1, 2, 3, 4}, Shape{4, 1, 1})}};
  Executor::ArrayMap args = Arguments(Conv(data, "a", 4), Shape{1, 3, 4, 4}, DType::kFloat32);
  args.insert(given.begin(), given.end());
  std::vector<std::vector<double>> outs[2];
  for (int last = 0; last < 2; ++last) outs[last] = Infer(s, args, last == 1);
  ASSERT_EQ(outs[0][0].size(), outs[1][0].size());
  for (size_t i = 0; i < outs[0][0].size(); ++i)
    ASSERT_NEAR(outs[1][0][i], outs[0][0][i], 2e-5 * (1 + std::abs(outs[0][0][i]))) << i;
}

// A BatchNorm that did not fold (folding off here; a sum's in a pre-activation block) normalizes a
// channels-last value over its last axis: no transposes around it.
TEST(ChannelsLast, AnUnfoldedBatchNormRunsChannelsLast) {
  const Symbol data = Symbol::Variable("data");
  const Symbol bn = Symbol::Op("BatchNorm", {Conv(data, "a", 6)}, {}, "bn");
  const Symbol s = Conv(Symbol::Op("relu", {bn}), "b", 4);
  const Graph g = ChannelsLast(s.ToGraph());
  EXPECT_EQ(CountOps(g, "transpose"), 2u);
  ASSERT_EQ(CountOps(g, "BatchNorm"), 1u);
  for (const Node& n : g.nodes()) {
    if (n.op != nullptr && n.op->name == "BatchNorm") EXPECT_EQ(n.attrs.raw().at("axis"), "3");
  }
  testing::ScopedEnv unfolded("WEFT_FOLD_BATCH_NORM", "0");
  Executor::ArrayMap args = Arguments(s, Shape{2, 3, 6, 6}, DType::kFloat32);
  args["bn_moving_var"].FillUniform(0.5, 1.5);
  const auto want = Infer(s, args, false), got = Infer(s, args, true);
  ASSERT_EQ(got[0].size(), want[0].size());
  for (size_t i = 0; i < got[0].size(); ++i)
    ASSERT_NEAR(got[0][i], want[0][i], 2e-5 * (1 + std::abs(want[0][i]))) << i;
}

TEST(ChannelsLast, OnlyCpuInferenceBindsConvert) {
  const Symbol net = ResidualNet();
  const BindResult inference = BindCpu(net, Shape{1, 3, 8, 8});
  EXPECT_EQ(inference.channels_last, 5);
  EXPECT_EQ(CountChannelsLast(inference.graph), 5u);
  const BindResult training = BindCpu(net, Shape{1, 3, 8, 8}, {"stem_weight"});
  EXPECT_EQ(training.channels_last, 0);
  EXPECT_EQ(CountChannelsLast(training.graph), 0u);
  testing::ScopedEnv off("WEFT_CHANNELS_LAST", "0");
  EXPECT_EQ(CountChannelsLast(BindCpu(net, Shape{1, 3, 8, 8}).graph), 0u);
}

}  // namespace
}  // namespace weft
