// The CPU inference pass that folds a 1x1 convolution into the 3x3 depthwise convolution that
// alone reads it (passes/fold_depthwise.h) and the op it makes (_conv_depthwise, oneDNN's
// depthwise post-op): MobileNet v2's inverted residual blocks, with relu6 epilogues, strides 1
// and 2 and a residual sum, bound with the pass on compute what they compute with it off (float32
// within rounding); only what may fold folds (NCHW, float64, bfloat16, a second reader, a grouped
// or 5x5 second convolution keep their pair); only CPU inference binds fold.
#include "passes/fold_depthwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "passes/channels_last.h"
#include "passes/fold_activation.h"
#include "passes/infer.h"
#include "passes/pipeline.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::BindCpu;
using testing::CountOps;

std::string Pair(int v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; }

// A convolution with a bias and a relu6 (fold_activation makes it the epilogue).
Symbol ConvRelu6(const Symbol& x, const std::string& name, int filters, int kernel, int stride,
                 int groups) {
  const Symbol c = Symbol::Op("Convolution", {x},
                              {{"kernel", Pair(kernel)},
                               {"stride", Pair(stride)},
                               {"pad", Pair(kernel / 2)},
                               {"num_filter", std::to_string(filters)},
                               {"num_group", std::to_string(groups)}},
                              name);
  return Symbol::Op("relu6", {c}, {}, name + "_relu6");
}

// MobileNet v2's inverted residual block: a 1x1 expansion to `expand` channels (relu6), a 3x3
// depthwise filter (relu6, `stride`), a 1x1 projection to `out` channels, plus x when the shapes
// allow.
Symbol InvertedResidual(const Symbol& x, const std::string& name, int in, int expand, int out,
                        int stride) {
  Symbol y = ConvRelu6(x, name + "_expand", expand, 1, 1, 1);
  y = ConvRelu6(y, name + "_dw", expand, 3, stride, expand);
  y = Symbol::Op("Convolution", {y}, {{"kernel", "(1, 1)"}, {"num_filter", std::to_string(out)}},
                 name + "_project");
  return stride == 1 && in == out ? Symbol::Op("add", {x, y}, {}, name + "_sum") : y;
}

Symbol MobileNetPart() {
  Symbol x = ConvRelu6(Symbol::Variable("data"), "stem", 8, 3, 2, 1);
  x = InvertedResidual(x, "b1", 8, 48, 8, 1);
  x = InvertedResidual(x, "b2", 8, 48, 16, 2);
  return InvertedResidual(x, "b3", 16, 96, 16, 1);
}

void ExpectSame(const Symbol& s, const Shape& data, double tol) {
  const Executor::ArrayMap args = testing::RandomArguments(s, {{"data", data}});
  const std::vector<double> want = testing::InferOutputs(s, args, "WEFT_FOLD_DEPTHWISE", false)[0],
                            got = testing::InferOutputs(s, args, "WEFT_FOLD_DEPTHWISE", true)[0];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

TEST(FoldDepthwise, InvertedResidualBlocksComputeWhatUnfoldedOnesDo) {
  const Symbol net = MobileNetPart();
  const BindResult bound = BindCpu(net, Shape{2, 3, 17, 17});
  EXPECT_EQ(bound.folded_depthwise, 3);
  EXPECT_EQ(CountOps(bound.graph, "_conv_depthwise"), 3u);
  EXPECT_EQ(CountOps(bound.graph, "Convolution"), 4u) << "the stem and the three projections";
  // odd extents: the stride-2 filter's last row and column read the padding
  ExpectSame(net, Shape{2, 3, 17, 17}, 2e-5);
  ExpectSame(net, Shape{1, 3, 32, 32}, 2e-5);
}

TEST(FoldDepthwise, LeavesWhatItMayNotFold) {
  const Symbol data = Symbol::Variable("data");
  const Symbol expand = ConvRelu6(data, "e", 8, 1, 1, 1);
  const Shape shape{1, 4, 8, 8};
  // the expansion read twice: its output must exist
  const Symbol twice = Symbol::Op(
      "add", {ConvRelu6(expand, "dw", 8, 3, 1, 8),
              Symbol::Op("Pooling", {expand},
                         {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"pool_type", "max"}})});
  EXPECT_EQ(BindCpu(twice, shape).folded_depthwise, 0);
  ExpectSame(twice, shape, 2e-5);
  // a grouped (not depthwise) or 5x5 second convolution
  EXPECT_EQ(BindCpu(ConvRelu6(expand, "g", 8, 3, 1, 2), shape).folded_depthwise, 0);
  EXPECT_EQ(BindCpu(ConvRelu6(expand, "k5", 8, 5, 1, 8), shape).folded_depthwise, 0);
  // NCHW (channels last off), float64 and bfloat16 keep their pair (_conv_depthwise is float32):
  // the pair after the passes a CPU inference bind runs before this one, typed each way
  const Symbol pair = ConvRelu6(expand, "dw", 8, 3, 1, 8);
  {
    testing::ScopedEnv nchw("WEFT_CHANNELS_LAST", "0");
    EXPECT_EQ(BindCpu(pair, shape).folded_depthwise, 0);
  }
  const Graph nhwc = ChannelsLast(FoldActivation(pair.ToGraph()));
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    std::map<std::string, DType> args;
    for (const std::string& name : pair.ListArguments()) args[name] = t;
    int folded = 0;
    FoldDepthwise(InferShapesAndTypes(nhwc, {{"data", shape}}, args, DeviceType::kCpu), &folded);
    EXPECT_EQ(folded, t == DType::kFloat32 ? 1 : 0) << t;
  }
  // a training bind folds nothing
  EXPECT_EQ(BindCpu(pair, shape, {"e_weight"}).folded_depthwise, 0);
}

}  // namespace
}  // namespace weft
