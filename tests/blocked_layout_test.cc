// The CPU training pass that hands blocked images between convolutions, poolings and BatchNorms
// (passes/blocked_layout.h), and the ops' layout NCHW16c it sets (ops/nn/window2d.h): a residual
// network trains to the same outputs, gradients and running statistics with the pass as without
// (float32 within rounding, bfloat16 within its own); a value read as NCHW keeps its component in
// NCHW; each op of layout NCHW16c computes on blocked images what it computes on NCHW ones.
#include "passes/blocked_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ops/cpu/internal/dnnl_util.h"
#include "ops/nn/window2d.h"
#include "passes/infer.h"
#include "passes/pipeline.h"
#include "tests/op_test_util.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ArrayOf;
using testing::ExpectNear;
using testing::ScopedEnv;
using testing::ValuesOf;

// A new array with a's values.
NDArray CopyOf(const NDArray& a) {
  NDArray out(a.shape(), a.device(), a.dtype());
  a.CopyTo(out);
  return out;
}

const Shape kData{4, 3, 12, 12};

Symbol ConvBn(Symbol x, const std::string& name, int filters, int kernel, int stride,
              bool relu = true) {
  const std::string k = "(" + std::to_string(kernel) + ", " + std::to_string(kernel) + ")";
  const std::string s = "(" + std::to_string(stride) + ", " + std::to_string(stride) + ")";
  const std::string p = kernel == 3 ? "(1, 1)" : "(0, 0)";
  Symbol conv = Symbol::Op(
      "Convolution", {x},
      {{"kernel", k}, {"stride", s}, {"pad", p}, {"num_filter", std::to_string(filters)}},
      name + "_conv");
  Symbol bn = Symbol::Op("BatchNorm", {conv}, {}, name + "_bn");
  return relu ? Symbol::Op("relu", {bn}) : bn;
}

// A stem of 3 channels (NCHW in), a max pooling, a basic block with an identity shortcut and one
// with a strided projection, a global average pooling (1x1: the same bytes either way), a dense
// layer read through flatten, summed into a loss.
// With `stem_too`, the stem's output is an output of the graph as well.
Symbol ResidualNet(bool stem_too = false) {
  const Symbol data = Symbol::Variable("data");
  const Symbol stem = ConvBn(data, "stem", 16, 3, 1);
  const Symbol pool = Symbol::Op(
      "Pooling", {stem}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}});
  const Symbol a = ConvBn(ConvBn(pool, "a1", 16, 3, 1), "a2", 16, 3, 1, false);
  const Symbol block_a = Symbol::Op("relu", {Symbol::Op("add", {a, pool})});
  const Symbol b = ConvBn(ConvBn(block_a, "b1", 32, 3, 2), "b2", 32, 3, 1, false);
  const Symbol shortcut = ConvBn(block_a, "proj", 32, 1, 2, false);
  const Symbol block_b = Symbol::Op("relu", {Symbol::Op("add", {b, shortcut})});
  const Symbol gap =
      Symbol::Op("Pooling", {block_b}, {{"global_pool", "true"}, {"pool_type", "avg"}});
  const Symbol fc =
      Symbol::Op("FullyConnected", {Symbol::Op("flatten", {gap})}, {{"num_hidden", "5"}}, "fc");
  const Symbol loss =  // in float32 (the CPU's sum takes no bfloat16)
      Symbol::Op("sum", {Symbol::Op("square", {Symbol::Op("Cast", {fc}, {{"dtype", "float32"}})})});
  return stem_too ? Symbol::Group({loss, stem}) : loss;
}

// The bind pipeline on the CPU for `net` on kData, differentiating `wrt` (none: inference).
BindResult Bind(const Symbol& net, std::set<std::string> wrt) {
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = InferArgumentShapes(net.ToGraph(), {{"data", kData}});
  request.differentiate = std::move(wrt);
  return RunBindPipeline(net.ToGraph(), request);
}

// One training step (forward, backward from ones) with the pass on or off: every output, every
// gradient and every argument after it (the running statistics move), as doubles.
std::map<std::string, std::vector<double>> TrainStep(const Symbol& net,
                                                     const Executor::ArrayMap& values, bool on) {
  ScopedEnv env("WEFT_BLOCKED_LAYOUT", on ? "1" : "0");
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, value] : values) {
    args[name] = CopyOf(value);
    grads[name] = NDArray(value.shape(), Device::Cpu(), value.dtype());
    reqs[name] = GradReq::kWrite;
  }
  for (const std::string& name : Executor::MutatedArguments(net)) {
    grads.erase(name);
    reqs.erase(name);
  }
  auto exec = Executor::Bind(net, Device::Cpu(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward();
  std::map<std::string, std::vector<double>> got;
  auto add = [&](const std::string& key, const NDArray& a) { got[key] = ValuesOf(a); };
  for (size_t o = 0; o < exec->outputs().size(); ++o)
    add("out" + std::to_string(o), exec->outputs()[o]);
  for (const auto& [name, g] : grads) add("d_" + name, g);
  for (const auto& [name, a] : args) add(name, a);
  return got;
}

// Random arguments of `net` on kData in `dtype`, but BatchNorm's parameters and statistics
// (float32).
Executor::ArrayMap ArgumentsIn(const Symbol& net, DType dtype) {
  Executor::ArrayMap values = testing::RandomArguments(net, {{"data", kData}});
  for (auto& [name, value] : values) {
    if (dtype != DType::kFloat32 && name.find("_bn_") == std::string::npos)
      value = Invoke("Cast", {value}, {{"dtype", std::string(DTypeName(dtype))}}).at(0);
  }
  return values;
}

void ExpectSameStep(DType dtype, double tol) {
  const Symbol net = ResidualNet();
  const Executor::ArrayMap values = ArgumentsIn(net, dtype);
  const auto want = TrainStep(net, values, false), got = TrainStep(net, values, true);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, w] : want) {
    const std::vector<double>& g = got.at(key);
    ASSERT_EQ(g.size(), w.size()) << key;
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], tol * (1 + scale)) << key << "[" << i << "]";
  }
}

// NCHW values of shape s (channels a multiple of 16) as they lie in nChw16c.
std::vector<double> Blocked(const std::vector<double>& v, const Shape& s) {
  std::vector<double> out(v.size());
  const int64_t c = s[1], plane = s[2] * s[3];
  for (int64_t i = 0; i < s[0]; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < plane; ++p)
        out[((i * (c / 16) + ch / 16) * plane + p) * 16 + ch % 16] = v[(i * c + ch) * plane + p];
    }
  }
  return out;
}

// `op` on x (NCHW, channels a multiple of 16) and `rest`, in layout NCHW and in layout NCHW16c
// on x blocked: output 0 of the second is the first's, blocked where BlockedImage says so.
void ExpectBlockedOp(const std::string& op, AttrMap attrs, const Shape& x_shape,
                     const std::vector<NDArray>& rest, DType dtype, double tol,
                     bool train = false) {
  std::vector<double> x(x_shape.Size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * i) + 0.1 * (i % 7);
  std::vector<NDArray> plain = {ArrayOf(x, x_shape, dtype)},
                       blocked = {ArrayOf(Blocked(x, x_shape), x_shape, dtype)};
  for (const NDArray& r : rest) {
    plain.push_back(CopyOf(r));
    blocked.push_back(CopyOf(r));
  }
  const NDArray want = Invoke(op, plain, attrs, {.is_train = train}).at(0);
  attrs["layout"] = "NCHW16c";
  const NDArray got = Invoke(op, blocked, attrs, {.is_train = train}).at(0);
  ASSERT_EQ(got.shape(), want.shape()) << op;
  const std::vector<double> w = ValuesOf(want);
  ExpectNear(ValuesOf(got), BlockedImage(want.shape()) ? Blocked(w, want.shape()) : w, tol,
             op + " " + std::string(DTypeName(dtype)));
}

TEST(LayoutNchw16c, EachOpComputesOnBlockedImagesWhatItDoesOnNchw) {
  const Shape x{2, 16, 6, 5};
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const double tol = t == DType::kBFloat16 ? 1e-2 : t == DType::kFloat32 ? 1e-5 : 1e-12;
    std::vector<double> wv(32 * 16 * 9), bv(32);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.2 * std::cos(0.11 * i);
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.05 * i - 0.8;
    const NDArray w = ArrayOf(wv, Shape{32, 16, 3, 3}, t), b = ArrayOf(bv, Shape{32}, t);
    ExpectBlockedOp("Convolution", {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "32"}},
                    x, {w, b}, t, tol);
    ExpectBlockedOp("Convolution",
                    {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"num_filter", "32"}}, x, {w, b},
                    t, tol);
    for (const char* type : {"max", "avg"}) {
      ExpectBlockedOp("Pooling", {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", type}},
                      x, {}, t, tol);
      ExpectBlockedOp("Pooling", {{"global_pool", "true"}, {"pool_type", type}}, x, {}, t, tol);
    }
    const DType stat = t == DType::kFloat64 ? t : DType::kFloat32;
    std::vector<NDArray> bn;
    for (int i = 0; i < 4; ++i) {
      bn.emplace_back(Shape{16}, Device::Cpu(), stat);
      bn.back().FillUniform(0.5, 1.5);
    }
    for (bool train : {false, true}) {
      ExpectBlockedOp("BatchNorm", {}, x, bn, t, tol, train);
      ExpectBlockedOp("BatchNorm", {{"act_type", "relu"}}, x, bn, t, tol, train);
    }
  }
}

TEST(LayoutNchw16c, BatchNormTakesItFor4DDataOverAxis1Only) {
  NDArray x(Shape{2, 5, 16}), s(Shape{16});
  x.Fill(1);
  s.Fill(1);
  EXPECT_NE(testing::ErrorMessage([&] {
              Invoke("BatchNorm", {x, s, s, s, s}, {{"axis", "-1"}, {"layout", "NCHW16c"}});
            }).find("layout NCHW16c takes 4-D data normalized over axis 1"),
            std::string::npos);
}

TEST(BlockedLayout, AResidualNetworkTrainsBlockedAsInNchw) {
  const BindResult r = Bind(ResidualNet(), {"stem_conv_weight"});
  // Every convolution, BatchNorm and pooling but the global one (its 1x1 output is no blocked
  // image, and its input's component joins), forward and backward; the stem's data stays NCHW.
  int windows = 0;
  for (const Node& n : r.graph.nodes()) {
    if (n.op != nullptr && n.attrs.raw().count("layout") != 0 &&
        n.attrs.raw().at("layout") == "NCHW16c")
      ++windows;
  }
  EXPECT_EQ(r.blocked, windows);
  EXPECT_EQ(r.blocked, 2 * (6 + 6 + 2)) << "6 convolutions, 6 BatchNorms, 2 poolings, and backward";
  ExpectSameStep(DType::kFloat32, 1e-4);
}

TEST(BlockedLayout, BFloat16TrainsBlockedAsInNchw) { ExpectSameStep(DType::kBFloat16, 3e-2); }

// Every convolution of a blocked training step runs a oneDNN kernel, not its reference loops: the
// backward of a convolution whose data is NCHW (a stem's 3 channels, 8 channels) beside a blocked
// gradient once asked for layouts oneDNN has no kernel for (24 ms a step for 0.1).
TEST(BlockedLayout, NoConvolutionRunsOneDnnsReferenceLoops) {
  const auto convolutions = [] {
    std::vector<std::string> keys;
    for (const std::string& key : cpu::ReferencePrimitives())
      if (key.find("|Convolution|") != std::string::npos) keys.push_back(key);
    return keys;
  };
  const std::vector<std::string> before = convolutions();
  // The residual network (a stem of 3 channels) and a stage of 8 channels into one of 16.
  Symbol x = ConvBn(Symbol::Variable("data"), "c8", 8, 3, 1);
  x = ConvBn(ConvBn(x, "s3", 16, 3, 2), "s1", 16, 1, 2);
  const Symbol narrow = Symbol::Op("sum", {Symbol::Op("Cast", {x}, {{"dtype", "float32"}})});
  for (const Symbol& net : {ResidualNet(), narrow}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16})
      TrainStep(net, ArgumentsIn(net, dtype), true);
  }
  EXPECT_EQ(convolutions(), before);
}

TEST(BlockedLayout, AnImageReadAsNchwKeepsItsComponentAndItsOpsNchw) {
  // The stem's output is also an output of the graph, bound to a user array in NCHW: its
  // component (the stem's relu, the max pooling's input) stays NCHW, and with it every op
  // touching it, their other images, and so on: here the whole network, as without the pass.
  EXPECT_EQ(Bind(ResidualNet(/*stem_too=*/true), {"stem_conv_weight"}).blocked, 0);
  // A flatten reading the stem (a reader that is no window op, BatchNorm or blind pointwise op)
  // does the same.
  const Symbol stem = ConvBn(Symbol::Variable("data"), "stem", 16, 3, 1);
  const Symbol flat = Symbol::Op("sum", {Symbol::Op("flatten", {stem})});
  EXPECT_EQ(Bind(flat, {"stem_conv_weight"}).blocked, 0);
  const Symbol gap = Symbol::Op("Pooling", {stem}, {{"global_pool", "true"}, {"pool_type", "avg"}});
  EXPECT_EQ(Bind(Symbol::Op("sum", {gap}), {"stem_conv_weight"}).blocked, 6)
      << "the stem's convolution and BatchNorm and the pooling, forward and backward";
}

TEST(BlockedLayout, InferenceBindsBlockWithoutChannelsLast) {
  EXPECT_EQ(Bind(ResidualNet(), {}).blocked, 0) << "inference binds take channels last";
  ScopedEnv nchw("WEFT_CHANNELS_LAST", "0");
  EXPECT_EQ(Bind(ResidualNet(), {}).blocked, 8)
      << "the 6 convolutions (their BatchNorms folded in) and the 2 poolings";
  const Symbol net = ResidualNet();
  const Executor::ArrayMap args = testing::RandomArguments(net, {{"data", kData}});
  const auto want = testing::InferOutputs(net, args, "WEFT_BLOCKED_LAYOUT", false);
  const auto got = testing::InferOutputs(net, args, "WEFT_BLOCKED_LAYOUT", true);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NEAR(got[0][0], want[0][0], 1e-4 * (1 + std::abs(want[0][0])));
  ScopedEnv off("WEFT_BLOCKED_LAYOUT", "0");
  EXPECT_EQ(Bind(ResidualNet(), {"stem_conv_weight"}).blocked, 0);
}

}  // namespace
}  // namespace weft
