// The CPU inference pass that folds a residual add into the convolution before it (passes/
// fold_sum.h) and the convolution's sum input it sets (with_sum): a folded graph computes what
// the unfolded one does (float32 within rounding; float64 to its rounding), only what may fold
// is folded (a broadcast add, a convolution read twice or without a bias keep their add), the
// activation after the sum folds too, and only CPU inference binds fold.
#include "passes/fold_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "passes/infer.h"
#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;
using testing::CountOps;

Symbol Conv(Symbol x, const std::string& name, int filters, AttrMap attrs = {}) {
  attrs.emplace("kernel", "(3, 3)");
  attrs.emplace("pad", "(1, 1)");
  attrs.emplace("num_filter", std::to_string(filters));
  return Symbol::Op("Convolution", {x}, attrs, name);
}

// A basic block: relu(conv(relu(conv(x))) + shortcut), the shortcut x or a strided projection.
Symbol Block(Symbol x, const std::string& name, int filters, bool project, AttrMap conv = {}) {
  AttrMap first = conv;
  if (project) first["stride"] = "(2, 2)";
  const Symbol a = Conv(x, name + "_a", filters, first);
  const Symbol b = Conv(Symbol::Op("relu", {a}), name + "_b", filters, conv);
  AttrMap one = {
      {"kernel", "(1, 1)"}, {"stride", "(2, 2)"}, {"num_filter", std::to_string(filters)}};
  const Symbol shortcut = project ? Symbol::Op("Convolution", {x}, one, name + "_proj") : x;
  return Symbol::Op("relu", {Symbol::Op("add", {b, shortcut}, {}, name + "_sum")}, {}, name);
}

void ExpectSame(const Symbol& s, const Shape& data, DType dtype, double tol) {
  const Executor::ArrayMap args = testing::RandomArguments(s, {{"data", data}}, dtype);
  const std::vector<double> want = testing::InferOutputs(s, args, "WEFT_FOLD_SUM", false)[0],
                            got = testing::InferOutputs(s, args, "WEFT_FOLD_SUM", true)[0];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

Graph Typed(const Symbol& s, const Shape& data) {
  return InferShapesAndTypes(s.ToGraph(), {{"data", data}}, {}, DeviceType::kCpu);
}

TEST(FoldSum, ResidualBlocksComputeWhatUnfoldedOnesDo) {
  const Symbol data = Symbol::Variable("data");
  const Symbol net = Block(Block(Conv(data, "stem", 8), "b1", 8, false), "b2", 16, true);
  int folded = 0;
  const Graph g = FoldSum(Typed(net, Shape{2, 3, 8, 8}), &folded);
  EXPECT_EQ(folded, 2);
  EXPECT_EQ(CountOps(g, "add"), 0u);
  // the relus after the sums folded as epilogues (and the others, as fold_activation does)
  EXPECT_EQ(CountOps(g, "relu"), 0u);
  for (const bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels last" : "NCHW");
    testing::ScopedEnv layout("WEFT_CHANNELS_LAST", nhwc ? "1" : "0");
    EXPECT_EQ(BindCpu(net, Shape{2, 3, 8, 8}).folded_sums, 2);
    ExpectSame(net, Shape{2, 3, 8, 8}, DType::kFloat32, 2e-5);
    ExpectSame(net, Shape{2, 3, 8, 8}, DType::kFloat64, 1e-12);
  }
}

TEST(FoldSum, LeavesWhatItMayNotFold) {
  const Symbol data = Symbol::Variable("data");
  const Symbol conv = Conv(data, "c", 4);
  const Symbol bias = Symbol::Variable("b");
  const Symbol broadcast = Symbol::Op("add", {conv, bias});  // b (4, 1, 1)
  const Symbol read_twice =
      Symbol::Group({Symbol::Op("add", {conv, data}), Symbol::Op("relu", {conv})});
  const Symbol unbiased = Symbol::Op("add", {Conv(data, "c", 4, {{"no_bias", "true"}}), data});
  const Symbol activated = Symbol::Op("add", {Conv(data, "c", 4, {{"act_type", "relu"}}), data});
  for (const Symbol& s : {broadcast, read_twice, unbiased, activated}) {
    int folded = -1;
    const Graph typed = InferShapesAndTypes(
        s.ToGraph(), {{"data", Shape{1, 4, 5, 5}}, {"b", Shape{4, 1, 1}}}, {}, DeviceType::kCpu);
    EXPECT_EQ(CountOps(FoldSum(typed, &folded), "add"), 1u);
    EXPECT_EQ(folded, 0);
  }
}

TEST(FoldSum, OnlyCpuInferenceBindsFold) {
  const Symbol net = Block(Symbol::Variable("data"), "b", 3, false);
  EXPECT_EQ(BindCpu(net, Shape{1, 3, 6, 6}).folded_sums, 1);
  EXPECT_EQ(BindCpu(net, Shape{1, 3, 6, 6}, {"b_a_weight"}).folded_sums, 0);
  testing::ScopedEnv off("WEFT_FOLD_SUM", "0");
  EXPECT_EQ(BindCpu(net, Shape{1, 3, 6, 6}).folded_sums, 0);
}

}  // namespace
}  // namespace weft
