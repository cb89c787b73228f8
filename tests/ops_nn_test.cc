// Neural-network ops: FullyConnected, Convolution, Pooling, softmax, log_softmax and
// SoftmaxCrossEntropy. Each case runs forward in float32 (req write and add) against a plain
// reference written here from the ops' definitions, and checks the float64 gradient against
// finite differences (see op_test_util.h). Shapes stay small so finite differences are quick.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/internal/dnnl_util.h"
#include "storage/ndarray.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

// float32 forward: oneDNN may sum in another order than the reference.
constexpr double kForwardTolerance = 2e-5;
constexpr double kGradientTolerance = 1e-5;

// ---- FullyConnected ----

// y[m, o] = b[o] + sum_k x[m, k] * w[o, k], with data seen as (M, K).
OpCase FullyConnectedCase(const Shape& data, int64_t hidden, bool bias, bool flatten) {
  int64_t k = data[data.ndim() - 1];
  if (flatten) k = data.Size() / data[0];
  const int64_t m = data.Size() / k;
  std::vector<Shape> shapes = {data, Shape{hidden, k}};
  if (bias) shapes.push_back(Shape{hidden});
  OpCase c{"FullyConnected",
           {{"num_hidden", std::to_string(hidden)}, {"no_bias", bias ? "false" : "true"},
            {"flatten", flatten ? "true" : "false"}},
           shapes,
           [=](const Inputs& in) {
             Values y(m * hidden);
             for (int64_t i = 0; i < m; ++i) {
               for (int64_t o = 0; o < hidden; ++o) {
                 double sum = bias ? in[2][o] : 0.0;
                 for (int64_t j = 0; j < k; ++j) sum += in[0][i * k + j] * in[1][o * k + j];
                 y[i * hidden + o] = sum;
               }
             }
             return Outputs{y};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = "FullyConnected data " + data.ToString() + (bias ? " bias" : " no_bias") + (flatten ? " flatten" : "");
  return c;
}

TEST(FullyConnected, MatchesReferenceWithAndWithoutBias) {
  RunOpCase(FullyConnectedCase(Shape{4, 6}, 5, true, true));
  RunOpCase(FullyConnectedCase(Shape{4, 6}, 5, false, true));
}

TEST(FullyConnected, FlattenFoldsTrailingAxesElseUsesTheLastAxis) {
  RunOpCase(FullyConnectedCase(Shape{3, 2, 4}, 5, true, true));    // (3, 8) x (5, 8)^T
  RunOpCase(FullyConnectedCase(Shape{3, 2, 4}, 5, true, false));   // (6, 4) x (5, 4)^T
  RunOpCase(FullyConnectedCase(Shape{2, 3, 4}, 3, false, false));
}

TEST(FullyConnected, OutputShapeKeepsLeadingAxesWithoutFlatten) {
  NDArray x(Shape{2, 3, 4}), w(Shape{7, 4}), b(Shape{7});
  EXPECT_EQ(Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "7"}, {"flatten", "false"}})[0].shape(),
            (Shape{2, 3, 7}));
  EXPECT_EQ(Invoke("FullyConnected", {x, NDArray(Shape{7, 12}), b}, {{"num_hidden", "7"}})[0].shape(), (Shape{2, 7}));
}

TEST(FullyConnected, BadInputsSayWhatWasExpected) {
  ExpectOpError("FullyConnected", {{"num_hidden", "128"}}, {Shape{2, 784}, Shape{128, 700}, Shape{128}},
                {"FullyConnected", "weight must be (128, 784), found (128, 700)"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{2, 3}, Shape{4, 3}, Shape{5}},
                {"FullyConnected", "bias must be (4,), found (5,)"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}}, {Shape{2, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "expected 2 input(s), found 3"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{2, 3}, Shape{4, 3}},
                {"FullyConnected", "expected 3 input(s), found 2"});
  ExpectOpError("FullyConnected", {{"num_hidden", "0"}}, {Shape{2, 3}, Shape{0, 3}, Shape{0}},
                {"FullyConnected", "num_hidden", "found '0'"});
  ExpectOpError("FullyConnected", {}, {Shape{2, 3}, Shape{4, 3}, Shape{4}}, {"FullyConnected", "num_hidden", "required"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}, {"flatten", "maybe"}}, {Shape{2, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "flatten", "'maybe'"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{0, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "non-empty", "(0, 3)"});
}

// ---- Convolution ----

// A 2-D window: kernel, stride and pad per axis (rows, columns).
struct Window {
  int64_t kh, kw, sh, sw, ph, pw;
  AttrMap Attrs() const {
    return {{"kernel", Shape{kh, kw}.ToString()}, {"stride", Shape{sh, sw}.ToString()}, {"pad", Shape{ph, pw}.ToString()}};
  }
  int64_t OutRows(int64_t h) const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t OutCols(int64_t w) const { return (w + 2 * pw - kw) / sw + 1; }
};

// y[n, f, oy, ox] = b[f] + sum over c, i, j of x[n, c, oy * sh - ph + i, ox * sw - pw + j] * w[f, c, i, j],
// where rows and columns outside the input (the padding) are zero.
OpCase ConvolutionCase(const Shape& data, int64_t filters, const Window& win, bool bias) {
  const int64_t N = data[0], C = data[1], H = data[2], W = data[3];
  const int64_t OH = win.OutRows(H), OW = win.OutCols(W);
  std::vector<Shape> shapes = {data, Shape{filters, C, win.kh, win.kw}};
  if (bias) shapes.push_back(Shape{filters});
  AttrMap attrs = win.Attrs();
  attrs["num_filter"] = std::to_string(filters);
  attrs["no_bias"] = bias ? "0" : "1";
  OpCase c{"Convolution", attrs, shapes, [=](const Inputs& in) {
             Values y(N * filters * OH * OW);
             for (int64_t n = 0; n < N; ++n)
               for (int64_t f = 0; f < filters; ++f)
                 for (int64_t oy = 0; oy < OH; ++oy)
                   for (int64_t ox = 0; ox < OW; ++ox) {
                     double sum = bias ? in[2][f] : 0.0;
                     for (int64_t ch = 0; ch < C; ++ch)
                       for (int64_t i = 0; i < win.kh; ++i)
                         for (int64_t j = 0; j < win.kw; ++j) {
                           const int64_t row = oy * win.sh - win.ph + i, col = ox * win.sw - win.pw + j;
                           if (row < 0 || row >= H || col < 0 || col >= W) continue;
                           sum += in[0][((n * C + ch) * H + row) * W + col] * in[1][((f * C + ch) * win.kh + i) * win.kw + j];
                         }
                     y[((n * filters + f) * OH + oy) * OW + ox] = sum;
                   }
             return Outputs{y};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = "Convolution data " + data.ToString() + " filters " + std::to_string(filters) + " " + attrs["kernel"] +
           " stride " + attrs["stride"] + " pad " + attrs["pad"] + (bias ? " bias" : " no_bias");
  return c;
}

TEST(Convolution, StrideTwoWithPaddingAndMoreFiltersThanChannels) {
  RunOpCase(ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, true));
  RunOpCase(ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, false));
}

TEST(Convolution, NonSquareKernelsStridesAndPads) {
  RunOpCase(ConvolutionCase(Shape{1, 2, 6, 5}, 3, {2, 3, 1, 2, 0, 1}, false));
  RunOpCase(ConvolutionCase(Shape{2, 4, 4, 4}, 2, {3, 2, 2, 1, 1, 0}, true));
  RunOpCase(ConvolutionCase(Shape{1, 1, 3, 7}, 2, {1, 4, 1, 3, 0, 2}, true));
}

TEST(Convolution, BadInputsSayWhatWasExpected) {
  const AttrMap attrs = {{"kernel", "(3, 3)"}, {"num_filter", "4"}};
  ExpectOpError("Convolution", attrs, {Shape{1, 3, 8, 8}, Shape{4, 2, 3, 3}, Shape{4}},
                {"Convolution", "weight must be (4, 3, 3, 3), found (4, 2, 3, 3)"});
  ExpectOpError("Convolution", attrs, {Shape{1, 3, 8, 8}, Shape{4, 3, 3, 3}, Shape{3}},
                {"Convolution", "bias must be (4,), found (3,)"});
  ExpectOpError("Convolution", attrs, {Shape{3, 8, 8}, Shape{4, 3, 3, 3}, Shape{4}},
                {"Convolution", "4-D (N, C, H, W), found (3, 8, 8)"});
  ExpectOpError("Convolution", {{"kernel", "(5, 5)"}, {"pad", "(1, 1)"}, {"num_filter", "1"}},
                {Shape{1, 1, 2, 2}, Shape{1, 1, 5, 5}, Shape{1}},
                {"Convolution", "kernel (5, 5) is larger than the padded input (4, 4)", "input (2, 2)", "pad (1, 1)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3, 3)"}, {"num_filter", "1"}}, {Shape{1, 1, 4, 4}, Shape{1}, Shape{1}},
                {"Convolution", "'kernel'", "(3, 3, 3)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"stride", "(0, 1)"}, {"num_filter", "1"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}}, {"Convolution", "'stride'", "(0, 1)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}}, {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "num_filter", "required"});
  ExpectOpError("Convolution", {{"num_filter", "1"}}, {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "kernel", "required"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "1"}, {"no_bias", "true"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}}, {"Convolution", "expected 2 input(s), found 3"});
}

// ---- The primitive cache ----

TEST(PrimitiveCache, SecondCallWithTheSameShapesReusesThePrimitive) {
  // Shapes no other test uses, so the first call creates the primitive.
  NDArray x(Shape{3, 17}), w(Shape{11, 17}), b(Shape{11});
  for (const NDArray& a : {x, w, b}) a.FillUniform(-1, 1);
  const AttrMap attrs = {{"num_hidden", "11"}};
  Invoke("FullyConnected", {x, w, b}, attrs)[0].WaitToRead();
  const cpu::PrimitiveCacheStats first = cpu::GetPrimitiveCacheStats();
  const std::vector<float> y1 = Invoke("FullyConnected", {x, w, b}, attrs)[0].ToVector<float>();
  const cpu::PrimitiveCacheStats second = cpu::GetPrimitiveCacheStats();
  EXPECT_EQ(second.misses, first.misses);
  EXPECT_EQ(second.hits, first.hits + 1);
  EXPECT_EQ(second.size, first.size);
  // Another batch size is another primitive.
  NDArray other_batch(Shape{5, 17});
  other_batch.Fill(1);
  Invoke("FullyConnected", {other_batch, w, b}, attrs)[0].WaitToRead();
  EXPECT_EQ(cpu::GetPrimitiveCacheStats().misses, second.misses + 1);
  EXPECT_EQ(Invoke("FullyConnected", {x, w, b}, attrs)[0].ToVector<float>(), y1);
}

}  // namespace
}  // namespace weft::testing
