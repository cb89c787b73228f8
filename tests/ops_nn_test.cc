// Neural-network ops: FullyConnected, Convolution, Pooling, softmax, log_softmax and
// SoftmaxCrossEntropy. Each case runs forward in float32 (req write and add) against a plain
// reference written here from the ops' definitions, and checks the float64 gradient against
// finite differences (see op_test_util.h). Shapes stay small so finite differences are quick.
// Convolution and Pooling are also checked against PyTorch's numbers
// (tests/conv_pool_torch_cases.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "storage/ndarray.h"
#include "tests/conv_pool_torch_cases.h"
#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"
#include "weft/weft.h"

namespace weft::testing {
namespace {

// float32 forward: oneDNN may sum in another order than the reference.
constexpr double kForwardTolerance = 2e-5;
constexpr double kGradientTolerance = 1e-5;

// float32 gradients (oneDNN's backward primitives) against float64 ones (the loops).
constexpr double kFloat32GradientTolerance = 1e-4;

// An array's values as doubles, whichever float dtype it holds.
std::vector<double> AsDoubles(const NDArray& a) {
  if (a.dtype() == DType::kFloat64) return a.ToVector<double>();
  const std::vector<float> v = a.ToVector<float>();
  return std::vector<double>(v.begin(), v.end());
}

NDArray FromDoubles(const std::vector<double>& v, const Shape& s, DType dtype) {
  if (dtype == DType::kFloat64) return NDArray::FromVector(v, s, TestDevice());
  return NDArray::FromVector(std::vector<float>(v.begin(), v.end()), s, TestDevice());
}

bool HasGradient(const OpCase& c, size_t input) {
  const auto& none = c.no_gradient_inputs;
  return std::find(none.begin(), none.end(), static_cast<int>(input)) == none.end();
}

// Inputs and output gradients for one gradient evaluation, exactly representable in float32.
struct GradientProblem {
  Inputs inputs;
  Outputs out_grads;
};

GradientProblem MakeGradientProblem(const OpCase& c) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto random = [&](int64_t n) {
    Values v(n);
    for (double& x : v) x = static_cast<float>(uniform(rng));
    return v;
  };
  GradientProblem p;
  for (size_t i = 0; i < c.input_shapes.size(); ++i) {
    p.inputs.push_back(random(c.input_shapes[i].Size()));
    if (c.init) c.init(static_cast<int>(i), p.inputs.back());
  }
  const Op& op = GetOp(c.op);
  for (const Shape& s : InferShapes(op, ParseAttrs(op, c.attrs), c.input_shapes)) {
    p.out_grads.push_back(random(s.Size()));
  }
  return p;
}

// The gradient of every input, computed in `dtype` by the op's gradient rule with request `req`
// into arrays that hold 0.5 beforehand.
Outputs GradientsIn(const OpCase& c, const GradientProblem& p, DType dtype, OpReq req) {
  const Op& op = GetOp(c.op);
  const Attrs attrs = ParseAttrs(op, c.attrs);
  std::vector<NDArray> inputs, grads, dy;
  std::vector<OpReq> reqs;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    inputs.push_back(FromDoubles(p.inputs[i], c.input_shapes[i], dtype));
    grads.emplace_back(c.input_shapes[i], TestDevice(), dtype);
    grads.back().Fill(0.5);
    reqs.push_back(HasGradient(c, i) ? req : OpReq::kNull);
  }
  const std::vector<NDArray> outputs = Invoke(op, attrs, inputs);
  for (size_t o = 0; o < outputs.size(); ++o)
    dy.push_back(FromDoubles(p.out_grads[o], outputs[o].shape(), dtype));
  InvokeBackward(op, attrs, inputs, outputs, dy, grads, reqs);
  Outputs values;
  for (const NDArray& g : grads) values.push_back(AsDoubles(g));
  return values;
}

// The message of the error that waiting for `a` rethrows, or "<no error>".
std::string ErrorAtWaitToRead(const NDArray& a) {
  try {
    a.WaitToRead();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// The harness checks gradients in float64 only, where the ops run their loops. This runs the
// gradient rule on the same inputs in float32 too, where they run oneDNN's backward primitives,
// with req write and req add, and compares with float64.
void CheckFloat32GradientMatchesFloat64(const OpCase& c) {
  SCOPED_TRACE(c.name + " float32 gradient");
  const GradientProblem p = MakeGradientProblem(c);
  const Outputs want = GradientsIn(c, p, DType::kFloat64, OpReq::kWrite);
  const Outputs written = GradientsIn(c, p, DType::kFloat32, OpReq::kWrite);
  const Outputs added = GradientsIn(c, p, DType::kFloat32, OpReq::kAddTo);
  for (size_t i = 0; i < want.size(); ++i) {
    if (!HasGradient(c, i)) continue;
    for (size_t k = 0; k < want[i].size(); ++k) {
      const double tol = kFloat32GradientTolerance * (1 + std::abs(want[i][k]));
      ASSERT_NEAR(written[i][k], want[i][k], tol) << "req write, input " << i << ", element " << k;
      ASSERT_NEAR(added[i][k] - 0.5, want[i][k], tol)
          << "req add, input " << i << ", element " << k;
    }
  }
}

// Every case: the harness's checks, then float32 gradients against float64.
// (On a GPU, RunOpCase compares the float32 gradients with the CPU's instead.)
void RunNnCase(const OpCase& c) {
  RunOpCase(c);
  if (TestDevice().is_gpu()) return;
  if (!::testing::Test::HasFatalFailure() && c.check_gradient)
    CheckFloat32GradientMatchesFloat64(c);
}

// ---- FullyConnected ----

// An activation epilogue's reference: act_type "none", relu, sigmoid, gelu or gelu_tanh.
double ApplyAct(const std::string& act, double y) {
  if (act == "relu") return std::max(y, 0.0);
  if (act == "relu6") return std::min(std::max(y, 0.0), 6.0);
  if (act == "sigmoid") return 1 / (1 + std::exp(-y));
  if (act == "gelu") return 0.5 * y * (1 + std::erf(y / std::sqrt(2.0)));
  if (act == "gelu_tanh")
    return 0.5 * y * (1 + std::tanh(std::sqrt(2 / M_PI) * (y + 0.044715 * y * y * y)));
  return y;
}

// y[m, o] = act(b[o] + sum_k x[m, k] * w[o, k]), with data seen as (M, K).
OpCase FullyConnectedCase(const Shape& data, int64_t hidden, bool bias, bool flatten,
                          const std::string& act = "none") {
  int64_t k = data[data.ndim() - 1];
  if (flatten) k = data.Size() / data[0];
  const int64_t m = data.Size() / k;
  std::vector<Shape> shapes = {data, Shape{hidden, k}};
  if (bias) shapes.push_back(Shape{hidden});
  OpCase c{"FullyConnected",
           {{"num_hidden", std::to_string(hidden)},
            {"no_bias", bias ? "false" : "true"},
            {"flatten", flatten ? "true" : "false"},
            {"act_type", act}},
           shapes,
           [=](const Inputs& in) {
             Values y(m * hidden);
             for (int64_t i = 0; i < m; ++i) {
               for (int64_t o = 0; o < hidden; ++o) {
                 double sum = bias ? in[2][o] : 0.0;
                 for (int64_t j = 0; j < k; ++j) sum += in[0][i * k + j] * in[1][o * k + j];
                 y[i * hidden + o] = ApplyAct(act, sum);
               }
             }
             return Outputs{y};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = "FullyConnected data " + data.ToString() + (bias ? " bias" : " no_bias") +
           (flatten ? " flatten" : "") + " act_type " + act;
  return c;
}

TEST(FullyConnected, MatchesReferenceWithAndWithoutBias) {
  RunNnCase(FullyConnectedCase(Shape{4, 6}, 5, true, true));
  RunNnCase(FullyConnectedCase(Shape{4, 6}, 5, false, true));
}

// The epilogue: cuBLASLt's (relu, gelu_tanh with a bias) or a kernel after the GEMM on the GPU,
// oneDNN's post-op on the CPU; the gradient recomputes the output before gelu's.
TEST(FullyConnected, AppliesItsActivationEpilogue) {
  for (const char* act : {"relu", "sigmoid", "gelu", "gelu_tanh"}) {
    RunNnCase(FullyConnectedCase(Shape{4, 6}, 5, true, true, act));
    RunNnCase(FullyConnectedCase(Shape{2, 3, 4}, 3, false, false, act));
  }
}

TEST(FullyConnected, FlattenFoldsTrailingAxesElseUsesTheLastAxis) {
  RunNnCase(FullyConnectedCase(Shape{3, 2, 4}, 5, true, true));   // (3, 8) x (5, 8)^T
  RunNnCase(FullyConnectedCase(Shape{3, 2, 4}, 5, true, false));  // (6, 4) x (5, 4)^T
  RunNnCase(FullyConnectedCase(Shape{2, 3, 4}, 3, false, false));
}

TEST(FullyConnected, OutputShapeKeepsLeadingAxesWithoutFlatten) {
  NDArray x(Shape{2, 3, 4}, TestDevice()), w(Shape{7, 4}, TestDevice()), b(Shape{7}, TestDevice());
  EXPECT_EQ(
      Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "7"}, {"flatten", "false"}})[0].shape(),
      (Shape{2, 3, 7}));
  EXPECT_EQ(Invoke("FullyConnected", {x, NDArray(Shape{7, 12}, TestDevice()), b},
                   {{"num_hidden", "7"}})[0]
                .shape(),
            (Shape{2, 7}));
}

TEST(FullyConnected, BadInputsSayWhatWasExpected) {
  ExpectOpError("FullyConnected", {{"num_hidden", "128"}},
                {Shape{2, 784}, Shape{128, 700}, Shape{128}},
                {"FullyConnected", "weight must be (128, 784), found (128, 700)"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{2, 3}, Shape{4, 3}, Shape{5}},
                {"FullyConnected", "bias must be (4,), found (5,)"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}},
                {Shape{2, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "expected 2 input(s), found 3"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{2, 3}, Shape{4, 3}},
                {"FullyConnected", "expected 3 input(s), found 2"});
  ExpectOpError("FullyConnected", {{"num_hidden", "0"}}, {Shape{2, 3}, Shape{0, 3}, Shape{0}},
                {"FullyConnected", "num_hidden", "found '0'"});
  ExpectOpError("FullyConnected", {}, {Shape{2, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "num_hidden", "required"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}, {"flatten", "maybe"}},
                {Shape{2, 3}, Shape{4, 3}, Shape{4}}, {"FullyConnected", "flatten", "'maybe'"});
  ExpectOpError("FullyConnected", {{"num_hidden", "4"}}, {Shape{0, 3}, Shape{4, 3}, Shape{4}},
                {"FullyConnected", "non-empty", "(0, 3)"});
}

TEST(FullyConnected, IntegerInputsAreAnErrorAtWaitToRead) {
  std::vector<NDArray> in = {NDArray(Shape{2, 3}, TestDevice(), DType::kInt32),
                             NDArray(Shape{4, 3}, TestDevice(), DType::kInt32)};
  for (const NDArray& a : in) a.Fill(1);
  const NDArray y = Invoke("FullyConnected", in, {{"num_hidden", "4"}, {"no_bias", "1"}})[0];
  const std::string message = ErrorAtWaitToRead(y);
  for (const char* part : {"FullyConnected", "expected float32", "found int32"}) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

// ---- Convolution ----

// A tap of a window: kernel position (i, j) over input position (row, col).
struct Tap {
  int64_t i, j, row, col;
};

// A 2-D window: kernel, stride and pad per axis (rows, columns); dilation (Convolution), ceil mode
// (Pooling's pooling_convention "full").
struct Window {
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t dh = 1, dw = 1;
  bool ceil = false;

  AttrMap Attrs() const {
    AttrMap a = {{"kernel", Shape{kh, kw}.ToString()},
                 {"stride", Shape{sh, sw}.ToString()},
                 {"pad", Shape{ph, pw}.ToString()}};
    if (dh != 1 || dw != 1) a["dilate"] = Shape{dh, dw}.ToString();
    if (ceil) a["pooling_convention"] = "full";
    return a;
  }
  // floor((size + 2 pad - span) / stride) + 1, or ceil, less the window starting past the input.
  static int64_t Extent(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    const int64_t room = size + 2 * p - d * (k - 1) - 1;
    if (!ceil) return room / s + 1;
    const int64_t out = (room + s - 1) / s + 1;
    return (out - 1) * s - p >= size ? out - 1 : out;
  }
  int64_t OutRows(int64_t h) const { return Extent(h, kh, sh, ph, dh, ceil); }
  int64_t OutCols(int64_t w) const { return Extent(w, kw, sw, pw, dw, ceil); }
  // The taps of the window at output (oy, ox) that fall inside an (h, w) input.
  std::vector<Tap> Taps(int64_t oy, int64_t ox, int64_t h, int64_t w) const {
    std::vector<Tap> taps;
    for (int64_t i = 0; i < kh; ++i) {
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t row = oy * sh - ph + i * dh, col = ox * sw - pw + j * dw;
        if (row >= 0 && row < h && col >= 0 && col < w) taps.push_back({i, j, row, col});
      }
    }
    return taps;
  }
};

// y[n, f, oy, ox] = b[f] + sum over the group's channels c and taps (i, j) of
// x[n, c, oy * sh - ph + i * dh, ox * sw - pw + j * dw] * w[f, c - first, i, j], where the filter's
// group is f / (F / G), its channels [first, first + C / G), and taps in the padding are zero.
Values ConvolutionReference(const Inputs& in, const Shape& data, int64_t filters, int64_t groups,
                            const Window& win, bool bias) {
  const int64_t N = data[0], C = data[1], H = data[2], W = data[3], CG = C / groups;
  const int64_t OH = win.OutRows(H), OW = win.OutCols(W);
  Values y(N * filters * OH * OW);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < filters; ++f) {
      const int64_t first = f / (filters / groups) * CG;
      for (int64_t oy = 0; oy < OH; ++oy) {
        for (int64_t ox = 0; ox < OW; ++ox) {
          double sum = bias ? in[2][f] : 0.0;
          for (const Tap& t : win.Taps(oy, ox, H, W)) {
            for (int64_t c = 0; c < CG; ++c) {
              sum += in[0][((n * C + first + c) * H + t.row) * W + t.col] *
                     in[1][((f * CG + c) * win.kh + t.i) * win.kw + t.j];
            }
          }
          y[((n * filters + f) * OH + oy) * OW + ox] = sum;
        }
      }
    }
  }
  return y;
}

OpCase ConvolutionCase(const Shape& data, int64_t filters, const Window& win, bool bias,
                       int64_t groups = 1) {
  std::vector<Shape> shapes = {data, Shape{filters, data[1] / groups, win.kh, win.kw}};
  if (bias) shapes.push_back(Shape{filters});
  AttrMap attrs = win.Attrs();
  attrs["num_filter"] = std::to_string(filters);
  attrs["no_bias"] = bias ? "0" : "1";
  if (groups != 1) attrs["num_group"] = std::to_string(groups);
  OpCase c{"Convolution", attrs, shapes, [=](const Inputs& in) {
             return Outputs{ConvolutionReference(in, data, filters, groups, win, bias)};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = "Convolution data " + data.ToString() + " filters " + std::to_string(filters) +
           " groups " + std::to_string(groups) + " " + attrs["kernel"] + " stride " +
           attrs["stride"] + " pad " + attrs["pad"] + " dilate " +
           Shape{win.dh, win.dw}.ToString() + (bias ? " bias" : " no_bias");
  return c;
}

// The epilogue: oneDNN's post-op on the CPU; on the GPU, with a bias and float data, one pass of
// bias and activation after cuDNN (ChannelBiasAct), without a bias Activation's kernel. The data
// in [-4, 4), so that outputs pass 6 and relu6 clips.
TEST(Convolution, AppliesItsActivationEpilogue) {
  for (const char* act : {"relu", "relu6", "gelu"}) {
    for (const bool bias : {true, false}) {
      OpCase c = ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, bias);
      c.attrs["act_type"] = act;
      c.init = [](int i, Values& v) {
        v = Uniform(static_cast<int64_t>(v.size()), 60 + i, i == 0 ? -4 : -1, i == 0 ? 4 : 1);
      };
      const auto plain = c.reference;
      c.reference = [=](const Inputs& in) {
        Outputs out = plain(in);
        for (double& y : out[0]) y = ApplyAct(act, y);
        return out;
      };
      c.name += std::string(" act_type ") + act;
      RunNnCase(c);
    }
  }
}

TEST(Convolution, StrideTwoWithPaddingAndMoreFiltersThanChannels) {
  RunNnCase(ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, true));
  RunNnCase(ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, false));
}

// 3x3, stride 1, channels a multiple of 16 and enough tiles per thread: where oneDNN's
// convolution_auto takes Winograd for float32 on AVX-512 (ops/cpu/convolution.cc,
// WinogradOrDirect; on this 2-core machine it does, for the forward and the data gradient, as
// ONEDNN_VERBOSE=1 shows), the output and the gradients (req write and add) match the reference
// and float64's direct loops. oneDNN's Winograd is the CPU's: on a GPU the other cases check
// cuDNN's convolutions (on the H100 this shape's float32 weight gradient was 1.2e-4 off float64's
// and further off the CPU's than the harness's GPU tolerance: which algorithm cuDNN's heuristics
// take here, and its error, is the GPU issue's to find out).
TEST(Convolution, ShapesWinogradTakesMatchFloat64) {
  if (TestDevice().is_gpu()) GTEST_SKIP() << "oneDNN's Winograd runs on the CPU";
  const OpCase c = ConvolutionCase(Shape{64, 64, 8, 8}, 64, {3, 3, 1, 1, 1, 1}, false);
  const GradientProblem p = MakeGradientProblem(c);
  const Op& op = GetOp(c.op);
  std::vector<NDArray> inputs;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    inputs.push_back(FromDoubles(p.inputs[i], c.input_shapes[i], DType::kFloat32));
  const std::vector<double> got = AsDoubles(Invoke(op, ParseAttrs(op, c.attrs), inputs)[0]);
  const std::vector<double> want = c.reference(p.inputs)[0];
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    ASSERT_NEAR(got[k], want[k], kFloat32GradientTolerance * (1 + std::abs(want[k]))) << k;
  CheckFloat32GradientMatchesFloat64(c);
}

TEST(Convolution, NonSquareKernelsStridesAndPads) {
  RunNnCase(ConvolutionCase(Shape{1, 2, 6, 5}, 3, {2, 3, 1, 2, 0, 1}, false));
  RunNnCase(ConvolutionCase(Shape{2, 4, 4, 4}, 2, {3, 2, 2, 1, 1, 0}, true));
  RunNnCase(ConvolutionCase(Shape{1, 1, 3, 7}, 2, {1, 4, 1, 3, 0, 2}, true));
}

TEST(Convolution, GroupedSplitsChannelsAndFilters) {
  RunNnCase(ConvolutionCase(Shape{2, 4, 5, 5}, 6, {3, 3, 1, 1, 1, 1}, true, 2));
  RunNnCase(ConvolutionCase(Shape{2, 4, 5, 5}, 6, {3, 3, 1, 1, 1, 1}, false, 2));
  RunNnCase(ConvolutionCase(Shape{1, 6, 4, 5}, 3, {2, 2, 1, 2, 0, 1}, true, 3));
}

// Depthwise: a group per channel, one filter each or several (a channel multiplier).
TEST(Convolution, DepthwiseHasAGroupPerChannel) {
  RunNnCase(ConvolutionCase(Shape{2, 3, 5, 4}, 3, {3, 3, 1, 1, 1, 1}, true, 3));
  RunNnCase(ConvolutionCase(Shape{2, 3, 5, 4}, 3, {3, 3, 2, 2, 1, 1}, false, 3));
  RunNnCase(ConvolutionCase(Shape{1, 2, 5, 5}, 4, {2, 3, 1, 1, 0, 1}, true, 2));
}

TEST(Convolution, DilatedTapsSkipPositions) {
  Window win{3, 2, 1, 1, 0, 0};
  win.dh = 2, win.dw = 3;
  RunNnCase(ConvolutionCase(Shape{1, 2, 7, 6}, 3, win, true));
  win.ph = 2, win.pw = 1;
  RunNnCase(ConvolutionCase(Shape{2, 2, 5, 5}, 2, win, false));
}

TEST(Convolution, DilatedStridedPaddedAndGroupedAtOnce) {
  Window win{3, 2, 2, 1, 2, 1};
  win.dh = 2, win.dw = 2;
  RunNnCase(ConvolutionCase(Shape{2, 4, 8, 7}, 4, win, true, 2));
  RunNnCase(ConvolutionCase(Shape{2, 4, 8, 7}, 4, win, false, 2));
}

TEST(Convolution, DilationEntersTheOutputExtent) {
  NDArray x(Shape{1, 2, 9, 8}, TestDevice()), w(Shape{4, 1, 3, 3}, TestDevice());
  const AttrMap attrs = {{"kernel", "(3, 3)"}, {"dilate", "(3, 2)"}, {"stride", "(2, 1)"},
                         {"pad", "(1, 0)"},    {"num_filter", "4"},  {"num_group", "2"},
                         {"no_bias", "true"}};
  // floor((9 + 2 - 3 * 2 - 1) / 2) + 1 = 3 rows, floor((8 - 2 * 2 - 1) / 1) + 1 = 4 columns.
  EXPECT_EQ(Invoke("Convolution", {x, w}, attrs)[0].shape(), (Shape{1, 4, 3, 4}));
}

TEST(Convolution, BadGroupsAndDilationsSayWhatWasExpected) {
  const AttrMap grouped = {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"num_group", "2"}};
  ExpectOpError("Convolution", grouped, {Shape{1, 3, 8, 8}, Shape{4, 1, 3, 3}, Shape{4}},
                {"Convolution", "channels must be divisible by num_group 2", "found 3 channels",
                 "(1, 3, 8, 8)"});
  ExpectOpError("Convolution", grouped, {Shape{1, 4, 8, 8}, Shape{4, 4, 3, 3}, Shape{4}},
                {"Convolution", "weight must be (4, 2, 3, 3), found (4, 4, 3, 3)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "6"}, {"num_group", "4"}},
                {Shape{1, 4, 8, 8}, Shape{6, 1, 3, 3}, Shape{6}},
                {"Convolution", "'num_filter'", "multiple of num_group 4", "found 6"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"num_group", "0"}},
                {Shape{1, 4, 8, 8}, Shape{4, 4, 3, 3}, Shape{4}},
                {"Convolution", "num_group", "'0'"});
  ExpectOpError(
      "Convolution",
      {{"kernel", "(3, 3)"}, {"dilate", "(3, 1)"}, {"pad", "(1, 1)"}, {"num_filter", "1"}},
      {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
      {"Convolution", "kernel (3, 3) with dilate (3, 1) spans (7, 3)",
       "larger than the padded input (6, 6)", "input (4, 4)", "pad (1, 1)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"dilate", "(0, 1)"}, {"num_filter", "1"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "'dilate'", "expected two extents >= 1", "(0, 1)"});
}

// The CPU computes Convolution and Pooling in float32, bfloat16 (mixed_precision_test) and
// float64; another dtype is an error naming the op, what it takes and what it found.
TEST(Convolution, IntegerInputsOnTheCpuAreAnErrorSayingWhatItTakes) {
  if (TestDevice().is_gpu()) GTEST_SKIP() << "the GPU names its own dtypes (gpu_call.h CheckDType)";
  std::vector<NDArray> in = {NDArray(Shape{1, 2, 4, 4}, TestDevice(), DType::kInt32),
                             NDArray(Shape{2, 2, 3, 3}, TestDevice(), DType::kInt32)};
  for (const NDArray& a : in) a.Fill(1);
  const std::map<std::string, NDArray> outputs = {
      {"Convolution", Invoke("Convolution", in,
                             {{"kernel", "(3, 3)"}, {"num_filter", "2"}, {"no_bias", "true"}})[0]},
      {"Pooling", Invoke("Pooling", {in[0]}, {{"kernel", "(2, 2)"}})[0]}};
  for (const auto& [op, y] : outputs) {
    const std::string message = ErrorAtWaitToRead(y);
    for (const std::string& part :
         {op, std::string("expected float32, bfloat16 or float64"), std::string("found int32")})
      EXPECT_NE(message.find(part), std::string::npos) << message;
  }
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
                {"Convolution", "kernel (5, 5) is larger than the padded input (4, 4)",
                 "input (2, 2)", "pad (1, 1)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3, 3)"}, {"num_filter", "1"}},
                {Shape{1, 1, 4, 4}, Shape{1}, Shape{1}}, {"Convolution", "'kernel'", "(3, 3, 3)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"stride", "(0, 1)"}, {"num_filter", "1"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "'stride'", "(0, 1)"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "num_filter", "required"});
  ExpectOpError("Convolution", {{"num_filter", "1"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "kernel", "required"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "1"}, {"no_bias", "true"}},
                {Shape{1, 1, 4, 4}, Shape{1, 1, 3, 3}, Shape{1}},
                {"Convolution", "expected 2 input(s), found 3"});
}

// ---- Pooling ----

// What an average divides by along one axis: with count_include_pad the window's positions in the
// padded input [-p, size + p) (a ceil-mode window past the padding counts only up to it), else its
// positions inside the input.
int64_t AvgCount(int64_t o, int64_t size, int64_t k, int64_t s, int64_t p, bool include_pad) {
  int64_t count = 0;
  for (int64_t at = o * s - p; at < o * s - p + k; ++at) {
    count += include_pad ? (at < size + p) : (at >= 0 && at < size);
  }
  return count;
}

// Max: the largest input under the window (padding never wins). Avg: the sum of the inputs under
// the window divided by AvgCount along each axis.
Values PoolingReference(const Values& x, const Shape& data, bool max, const Window& win,
                        bool include_pad) {
  const int64_t planes = data[0] * data[1], H = data[2], W = data[3];
  const int64_t OH = win.OutRows(H), OW = win.OutCols(W);
  Values y(planes * OH * OW);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oy = 0; oy < OH; ++oy) {
      for (int64_t ox = 0; ox < OW; ++ox) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        for (const Tap& t : win.Taps(oy, ox, H, W)) {
          best = std::max(best, x[(p * H + t.row) * W + t.col]);
          sum += x[(p * H + t.row) * W + t.col];
        }
        const int64_t count = AvgCount(oy, H, win.kh, win.sh, win.ph, include_pad) *
                              AvgCount(ox, W, win.kw, win.sw, win.pw, include_pad);
        y[(p * OH + oy) * OW + ox] = max ? best : sum / static_cast<double>(count);
      }
    }
  }
  return y;
}

// global_pool: the window is the whole plane.
OpCase PoolingCase(const Shape& data, const std::string& type, const Window& given, bool global,
                   bool include_pad = true) {
  const Window win = global ? Window{data[2], data[3], 1, 1, 0, 0} : given;
  AttrMap attrs = global ? AttrMap{{"global_pool", "true"}} : given.Attrs();
  attrs["pool_type"] = type;
  if (!include_pad) attrs["count_include_pad"] = "false";
  OpCase c{"Pooling", attrs, {data}, [=](const Inputs& in) {
             return Outputs{PoolingReference(in[0], data, type == "max", win, include_pad)};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = "Pooling " + type + " data " + data.ToString() +
           (global ? " global"
                   : " kernel " + attrs["kernel"] + " stride " + attrs["stride"] + " pad " +
                         attrs["pad"]) +
           (given.ceil ? " ceil" : "") + (include_pad ? "" : " count_include_pad false");
  return c;
}

TEST(Pooling, MaxAndAvgWithStrideAndPadding) {
  for (const char* type : {"max", "avg"}) {
    RunNnCase(PoolingCase(Shape{2, 2, 5, 5}, type, {3, 3, 2, 2, 1, 1}, false));
    RunNnCase(PoolingCase(Shape{1, 3, 4, 6}, type, {2, 3, 2, 1, 1, 1}, false));
    RunNnCase(PoolingCase(Shape{2, 1, 4, 4}, type, {2, 2, 2, 2, 0, 0}, false));
  }
}

TEST(Pooling, GlobalPoolCoversThePlane) {
  for (const char* type : {"max", "avg"}) RunNnCase(PoolingCase(Shape{2, 3, 4, 5}, type, {}, true));
  NDArray x(Shape{2, 3, 4, 5}, TestDevice());
  EXPECT_EQ(Invoke("Pooling", {x}, {{"global_pool", "1"}, {"kernel", "(2, 2)"}})[0].shape(),
            (Shape{2, 3, 1, 1}));
}

TEST(Pooling, GlobalPoolLeavesNoPaddingOut) {
  RunNnCase(PoolingCase(Shape{1, 2, 3, 4}, "avg", {}, true, false));
}

TEST(Pooling, AvgWithoutPaddingCountsOnlyTheInputsUnderTheWindow) {
  RunNnCase(PoolingCase(Shape{2, 2, 5, 5}, "avg", {3, 3, 2, 2, 1, 1}, false, false));
  RunNnCase(PoolingCase(Shape{1, 3, 4, 6}, "avg", {2, 3, 2, 1, 1, 1}, false, false));
  RunNnCase(PoolingCase(Shape{2, 1, 4, 4}, "avg", {2, 2, 2, 2, 0, 0}, false, false));  // no padding
}

// Rows: ceil mode adds a window that reaches past the padding (6 + 2 - 3 = 5 rows of room, stride
// 2: 4 windows, not 3). Columns: its extra window would start in the right padding (at 5, past the
// 5 columns), so there is none (2 windows).
TEST(Pooling, CeilModeAddsWindowsThatStartInsideTheInput) {
  Window win{3, 3, 2, 3, 1, 1};
  win.ceil = true;
  for (const char* type : {"max", "avg"}) {
    for (bool include_pad : {true, false})
      RunNnCase(PoolingCase(Shape{2, 2, 6, 5}, type, win, false, include_pad));
  }
  Window unpadded{2, 3, 2, 2, 0, 0};  // 3 rows (2 without ceil), 3 columns as without it
  unpadded.ceil = true;
  for (const char* type : {"max", "avg"})
    RunNnCase(PoolingCase(Shape{1, 2, 5, 7}, type, unpadded, false));
}

TEST(Pooling, PoolingConventionChoosesTheOutputExtent) {
  NDArray x(Shape{1, 1, 6, 5}, TestDevice());
  x.Fill(1);
  AttrMap attrs = {{"kernel", "(3, 3)"}, {"stride", "(2, 3)"}, {"pad", "(1, 1)"}};
  EXPECT_EQ(Invoke("Pooling", {x}, attrs)[0].shape(), (Shape{1, 1, 3, 2}));
  attrs["pooling_convention"] = "valid";
  EXPECT_EQ(Invoke("Pooling", {x}, attrs)[0].shape(), (Shape{1, 1, 3, 2}));
  attrs["pooling_convention"] = "full";
  EXPECT_EQ(Invoke("Pooling", {x}, attrs)[0].shape(), (Shape{1, 1, 4, 2}));
}

TEST(Pooling, BadInputsSayWhatWasExpected) {
  ExpectOpError("Pooling", {{"kernel", "(4, 4)"}}, {Shape{1, 1, 3, 3}},
                {"Pooling", "kernel (4, 4) is larger than the padded input (3, 3)"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}, {"pad", "(2, 1)"}}, {Shape{1, 1, 3, 3}},
                {"Pooling", "'pad'", "less than the kernel (2, 2)", "found (2, 1)"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}, {"pool_type", "min"}}, {Shape{1, 1, 3, 3}},
                {"Pooling", "pool_type", "'min'", "'max'", "'avg'"});
  ExpectOpError("Pooling", {{"pool_type", "max"}}, {Shape{1, 1, 3, 3}},
                {"Pooling", "kernel", "required"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}}, {Shape{3, 3}},
                {"Pooling", "4-D (N, C, H, W), found (3, 3)"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}}, {Shape{1, 1, 3, 3}, Shape{1}},
                {"Pooling", "expected 1 input(s), found 2"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}, {"pooling_convention", "same"}},
                {Shape{1, 1, 3, 3}},
                {"Pooling", "pooling_convention", "'same'", "'valid'", "'full'"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}, {"count_include_pad", "maybe"}},
                {Shape{1, 1, 3, 3}}, {"Pooling", "count_include_pad", "'maybe'"});
  ExpectOpError("Pooling", {{"kernel", "(4, 4)"}, {"pooling_convention", "full"}},
                {Shape{1, 1, 3, 3}},
                {"Pooling", "kernel (4, 4) is larger than the padded input (3, 3)"});
}

// ---- layout NHWC ----

// v, an (N, C, H, W) tensor row-major, as (N, H, W, C) (to_nhwc), or the reverse.
Values Relayout(const Values& v, const Shape& nchw, bool to_nhwc) {
  const int64_t N = nchw[0], C = nchw[1], plane = nchw[2] * nchw[3];
  Values out(v.size());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t p = 0; p < plane; ++p) {
        const int64_t first = (n * C + c) * plane + p, last = (n * plane + p) * C + c;
        if (to_nhwc)
          out[last] = v[first];
        else
          out[first] = v[last];
      }
    }
  }
  return out;
}

// The NCHW case `c`, whose output is `out` (NCHW), with layout NHWC: its data, its sum (input 3,
// with_sum) and its output channels last, everything else (weight, window) as it was; the
// reference transposes to c's and back.
OpCase ChannelsLast(OpCase c, const Shape& out) {
  const Shape data = c.input_shapes[0];
  const bool sum = c.input_shapes.size() > 3;
  c.attrs["layout"] = "NHWC";
  c.input_shapes[0] = Shape{data[0], data[2], data[3], data[1]};
  if (sum) c.input_shapes[3] = Shape{out[0], out[2], out[3], out[1]};
  c.reference = [data, out, sum, nchw = c.reference](const Inputs& in) {
    Inputs given = in;
    given[0] = Relayout(in[0], data, false);
    if (sum) given[3] = Relayout(in[3], out, false);
    Outputs y = nchw(given);
    y[0] = Relayout(y[0], out, true);
    return y;
  };
  c.name += " layout NHWC";
  return c;
}

Shape ConvOut(const Shape& data, int64_t filters, const Window& win) {
  return Shape{data[0], filters, win.OutRows(data[2]), win.OutCols(data[3])};
}

// oneDNN's channels-last kernels on float32, the loops on float64 (the gradient checks), cuDNN's
// NHWC kernels on a GPU, against the NCHW sums; a window over several channels tells the layouts
// apart.
TEST(ChannelsLast, ConvolutionComputesTheNchwSumsOnChannelsLastData) {
  struct Conv {
    Shape data;
    int64_t filters;
    Window win;
    bool bias;
    int64_t groups;
  };
  Window dilated{3, 2, 2, 1, 2, 1};
  dilated.dh = 2;
  for (const Conv& k : std::vector<Conv>{{Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, true, 1},
                                         {Shape{1, 2, 6, 5}, 3, {2, 3, 1, 2, 0, 1}, false, 1},
                                         {Shape{2, 4, 5, 5}, 6, {3, 3, 1, 1, 1, 1}, true, 2},
                                         {Shape{2, 3, 5, 4}, 3, {3, 3, 2, 2, 1, 1}, false, 3},
                                         {Shape{2, 4, 8, 7}, 4, dilated, true, 2}}) {
    RunNnCase(ChannelsLast(ConvolutionCase(k.data, k.filters, k.win, k.bias, k.groups),
                           ConvOut(k.data, k.filters, k.win)));
  }
  OpCase relu = ConvolutionCase(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1}, true);
  relu.attrs["act_type"] = "relu";
  const auto plain = relu.reference;
  relu.reference = [plain](const Inputs& in) {
    Outputs y = plain(in);
    for (double& v : y[0]) v = std::max(v, 0.0);
    return y;
  };
  relu.check_gradient = false;
  RunNnCase(ChannelsLast(relu, ConvOut(Shape{2, 3, 5, 5}, 4, {3, 3, 2, 2, 1, 1})));
}

TEST(ChannelsLast, PoolingComputesTheNchwWindowsOnChannelsLastData) {
  const Shape data{2, 3, 5, 5};
  const Window win{3, 3, 2, 2, 1, 1};
  Window ceil{3, 3, 2, 2, 1, 1};
  ceil.ceil = true;
  const Shape out{2, 3, win.OutRows(5), win.OutCols(5)};
  for (const char* type : {"max", "avg"}) {
    RunNnCase(ChannelsLast(PoolingCase(data, type, win, false), out));
    RunNnCase(ChannelsLast(PoolingCase(data, type, win, false, false), out));
    RunNnCase(ChannelsLast(PoolingCase(data, type, {}, true), Shape{2, 3, 1, 1}));
    // loops on float32 too: an average counting padding with a window past it
    RunNnCase(ChannelsLast(PoolingCase(data, type, ceil, false),
                           Shape{2, 3, ceil.OutRows(5), ceil.OutCols(5)}));
  }
}

TEST(ChannelsLast, ShapesAndErrorsNameTheLayout) {
  NDArray x(Shape{1, 6, 5, 3}, TestDevice());  // (N, H, W, C)
  x.Fill(1);
  const AttrMap pool = {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"layout", "NHWC"}};
  const AttrMap global = {{"global_pool", "true"}, {"pool_type", "avg"}, {"layout", "NHWC"}};
  EXPECT_EQ(Invoke("Pooling", {x}, pool)[0].shape(), (Shape{1, 2, 2, 3}));
  EXPECT_EQ(Invoke("Pooling", {x}, global)[0].shape(), (Shape{1, 1, 1, 3}));
  ExpectOpError("Pooling", pool, {Shape{3, 3}},
                {"Pooling", "4-D (N, H, W, C) (layout NHWC), found (3, 3)"});
  ExpectOpError("Pooling", {{"kernel", "(2, 2)"}, {"layout", "NCWH"}}, {Shape{1, 3, 3, 1}},
                {"Pooling", "layout", "'NCWH'", "'NCHW'", "'NHWC'"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "2"}, {"layout", "NHWC"}},
                {Shape{1, 5, 5, 3}, Shape{2, 5, 3, 3}, Shape{2}},
                {"Convolution", "weight must be (2, 3, 3, 3), found (2, 5, 3, 3)"});
}

// A window op's forward and backward on TestDevice() in dtype `t`, on NCHW values `in` (input 0
// of extents shapes[0], NCHW) and out_grad `dy` (NCHW, extents `out`), with layout NHWC or not:
// the output and every input's gradient (each starting from 0.5, so kAddTo shows), as NCHW values.
std::vector<Values> RunWindowOp(const std::string& op, AttrMap attrs, bool nhwc, const Inputs& in,
                                const std::vector<Shape>& shapes, const Shape& out,
                                const Values& dy, DType t, OpReq req) {
  const auto last = [](const Shape& s) { return Shape{s[0], s[2], s[3], s[1]}; };
  attrs["layout"] = nhwc ? "NHWC" : "NCHW";
  const Attrs a = ParseAttrs(GetOp(op), attrs);
  std::vector<NDArray> arrays = {nhwc
                                     ? ArrayOf(Relayout(in[0], shapes[0], true), last(shapes[0]), t)
                                     : ArrayOf(in[0], shapes[0], t)};
  for (size_t i = 1; i < in.size(); ++i) arrays.push_back(ArrayOf(in[i], shapes[i], t));
  const std::vector<NDArray> y = Invoke(GetOp(op), a, arrays);
  std::vector<NDArray> grads;
  for (const NDArray& x : arrays)
    grads.push_back(ArrayOf(Values(x.shape().Size(), 0.5), x.shape(), t));
  const NDArray g = nhwc ? ArrayOf(Relayout(dy, out, true), last(out), t) : ArrayOf(dy, out, t);
  InvokeBackward(GetOp(op), a, arrays, y, {g}, grads, std::vector<OpReq>(arrays.size(), req));
  std::vector<Values> result = {ValuesOf(y[0])};
  for (const NDArray& x : grads) result.push_back(ValuesOf(x));
  if (nhwc) {
    result[0] = Relayout(result[0], out, false);
    result[1] = Relayout(result[1], shapes[0], false);
  }
  return result;
}

// The GPU's channels-last convolution (cuDNN's NHWC kernels, the weight transposed to KRSC and
// its gradient back where a window has several taps over several channels a group, the bias
// gradient summed over rows) and pooling (cuDNN's, and weft's kernels on interleaved channels for
// 16 bits and ceil mode) against its NCHW ones, in float32, bfloat16 and float16, every gradient
// written and added to.
TEST(ChannelsLast, TheGpuComputesItInEveryFloatTypeAndRequest) {
  if (!TestDevice().is_gpu()) GTEST_SKIP() << "the CPU's cases are the two tests above";
  struct Case {
    std::string op;
    AttrMap attrs;
    std::vector<Shape> shapes;  // data (NCHW) and the parameters
    Shape out;                  // NCHW
  };
  const std::vector<Case> cases = {
      {"Convolution",
       {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "16"}},
       {Shape{2, 8, 6, 6}, Shape{16, 8, 3, 3}, Shape{16}},
       Shape{2, 16, 6, 6}},
      {"Convolution",
       {{"kernel", "(3, 3)"},
        {"stride", "(2, 2)"},
        {"pad", "(1, 1)"},
        {"num_filter", "8"},
        {"num_group", "2"},
        {"no_bias", "1"}},
       {Shape{2, 8, 7, 7}, Shape{8, 4, 3, 3}},
       Shape{2, 8, 4, 4}},
      {"Convolution",
       {{"kernel", "(1, 1)"}, {"stride", "(2, 2)"}, {"num_filter", "32"}, {"no_bias", "1"}},
       {Shape{2, 16, 6, 6}, Shape{32, 16, 1, 1}},
       Shape{2, 32, 3, 3}},
      {"Convolution",
       {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "8"}, {"num_group", "8"}},
       {Shape{2, 8, 6, 6}, Shape{8, 1, 3, 3}, Shape{8}},
       Shape{2, 8, 6, 6}},
      {"Pooling",
       {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"pool_type", "max"}},
       {Shape{2, 8, 7, 7}},
       Shape{2, 8, 4, 4}},
      {"Pooling",
       {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "avg"}},
       {Shape{2, 8, 6, 6}},
       Shape{2, 8, 3, 3}},
      {"Pooling",
       {{"kernel", "(3, 3)"},
        {"stride", "(2, 2)"},
        {"pool_type", "avg"},
        {"pooling_convention", "full"}},
       {Shape{2, 8, 6, 6}},
       Shape{2, 8, 3, 3}},
      {"Pooling",
       {{"global_pool", "true"}, {"pool_type", "avg"}},
       {Shape{2, 8, 6, 6}},
       Shape{2, 8, 1, 1}},
  };
  for (const DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    const double tol = t == DType::kFloat32 ? kGpuTolerance : t == DType::kFloat16 ? 4e-3 : 3e-2;
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      Inputs in;
      for (size_t i = 0; i < c.shapes.size(); ++i)
        in.push_back(Uniform(c.shapes[i].Size(), 10 * k + i));
      const Values dy = Uniform(c.out.Size(), 10 * k + 9);
      for (const OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
        const std::string what = c.op + " case " + std::to_string(k) + " in " +
                                 std::string(DTypeName(t)) +
                                 (req == OpReq::kAddTo ? ", adding" : "");
        const std::vector<Values> nchw =
            RunWindowOp(c.op, c.attrs, false, in, c.shapes, c.out, dy, t, req);
        const std::vector<Values> nhwc =
            RunWindowOp(c.op, c.attrs, true, in, c.shapes, c.out, dy, t, req);
        for (size_t i = 0; i < nchw.size(); ++i)
          ExpectNear(nhwc[i], nchw[i], tol,
                     what + (i == 0 ? ": output" : ": gradient " + std::to_string(i - 1)));
      }
    }
  }
}

// The GPU takes neither the CPU's blocked layout NCHW16c (BatchNorm does not take it there
// either) nor a convolution's sum: each is an error naming the op, not a wrong answer.
TEST(ChannelsLast, TheGpuRefusesTheCpusBlockedLayoutAndSum) {
  if (!TestDevice().is_gpu()) GTEST_SKIP() << "the CPU computes them";
  NDArray w(Shape{2, 3, 3, 3}, TestDevice());
  w.Fill(1);
  NDArray nchw(Shape{1, 3, 5, 5}, TestDevice()), b(Shape{2}, TestDevice()),
      sum(Shape{1, 2, 3, 3}, TestDevice());
  for (NDArray* t : {&nchw, &b, &sum}) t->Fill(1);
  const AttrMap with_sum = {{"kernel", "(3, 3)"}, {"num_filter", "2"}, {"with_sum", "true"}};
  NDArray x16(Shape{2, 16, 5, 5}, TestDevice()), w16(Shape{2, 16, 3, 3}, TestDevice()),
      c16(Shape{16}, TestDevice());
  for (NDArray* t : {&x16, &w16, &c16}) t->Fill(1);
  const AttrMap blocked_conv = {
      {"kernel", "(3, 3)"}, {"num_filter", "2"}, {"no_bias", "1"}, {"layout", "NCHW16c"}};
  for (const auto& [op, inputs, attrs] :
       std::vector<std::tuple<std::string, std::vector<NDArray>, AttrMap>>{
           {"Convolution", {nchw, w, b, sum}, with_sum},
           {"Convolution", {x16, w16}, blocked_conv},
           {"Pooling", {x16}, {{"kernel", "(2, 2)"}, {"layout", "NCHW16c"}}},
           {"BatchNorm", {x16, c16, c16, c16, c16}, {{"layout", "NCHW16c"}}}}) {
    try {
      Invoke(op, inputs, attrs)[0].WaitToRead();
      ADD_FAILURE() << op << " with " << attrs.at(attrs.count("layout") ? "layout" : "with_sum")
                    << " ran on the GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("runs on the CPU only"), std::string::npos) << e.what();
    }
  }
}

// ---- _conv_depthwise (passes/fold_depthwise.h makes it; CPU only) ----

// MobileNet's expansion and depthwise filter on channels-last data, bound for inference with the
// depthwise folding pass off and on: the one op gives the two convolutions' outputs, strides 1
// and 2, with and without epilogues. No case can call the op (a pass makes it), so this test
// marks it covered.
TEST(ConvDepthwise, EqualsTheTwoConvolutionsItReplaces) {
  if (TestDevice().is_gpu()) GTEST_SKIP() << "a CPU inference pass makes it; the GPU never runs it";
  for (const int stride : {1, 2}) {
    for (const std::string act : {"relu6", "none"}) {
      SCOPED_TRACE("stride " + std::to_string(stride) + ", act_type " + act);
      const Symbol expand = Symbol::Op(
          "Convolution", {Symbol::Variable("data")},
          {{"kernel", "(1, 1)"}, {"num_filter", "24"}, {"layout", "NHWC"}, {"act_type", act}},
          "expand");
      const Symbol net = Symbol::Op(
          "Convolution", {expand},
          {{"kernel", "(3, 3)"},
           {"pad", "(1, 1)"},
           {"stride", "(" + std::to_string(stride) + ", " + std::to_string(stride) + ")"},
           {"num_filter", "24"},
           {"num_group", "24"},
           {"layout", "NHWC"},
           {"act_type", act}},
          "dw");
      Executor::ArrayMap args;
      const std::map<std::string, Shape> shapes =
          InferArgumentShapes(net.ToGraph(), {{"data", Shape{2, 9, 9, 8}}});
      for (const auto& [name, shape] : shapes) {
        args[name] = NDArray(shape, TestDevice());
        args[name].FillUniform(-1, 1);
      }
      std::vector<std::vector<float>> outputs;
      for (const char* on : {"0", "1"}) {
        testing::ScopedEnv fold("WEFT_FOLD_DEPTHWISE", on);
        auto exec = Executor::Bind(net, TestDevice(), args);
        exec->Forward(/*is_train=*/false);
        outputs.push_back(exec->outputs()[0].ToVector<float>());
      }
      ASSERT_EQ(outputs[1].size(), outputs[0].size());
      for (size_t i = 0; i < outputs[0].size(); ++i)
        ASSERT_NEAR(outputs[1][i], outputs[0][i], 2e-5 * (1 + std::abs(outputs[0][i]))) << i;
    }
  }
  MarkCovered("_conv_depthwise");
}

// ---- Convolution's sum (with_sum) ----

// `c` (a convolution with a bias, output `out`) with a fourth input added before its epilogue
// `act` ("none" or "relu"); the gradient of the sum is the output's before the activation.
OpCase WithSum(OpCase c, const Shape& out, const std::string& act) {
  c.attrs["with_sum"] = "true";
  c.attrs["act_type"] = act;
  c.input_shapes.push_back(out);
  c.reference = [conv = c.reference, act](const Inputs& in) {
    Outputs y = conv(in);
    for (size_t i = 0; i < y[0].size(); ++i) {
      y[0][i] += in[3][i];
      if (act == "relu") y[0][i] = std::max(y[0][i], 0.0);
    }
    return y;
  };
  c.name += " with_sum act " + act;
  return c;
}

TEST(Convolution, WithSumAddsItsFourthInputBeforeTheEpilogue) {
  if (TestDevice().is_gpu())
    GTEST_SKIP() << "with_sum runs on the CPU (TheGpuRefusesTheCpusBlockedLayoutAndSum)";
  const Shape data{2, 3, 5, 5};
  const Window win{3, 3, 2, 2, 1, 1};
  for (const char* act : {"none", "relu"}) {
    OpCase c = WithSum(ConvolutionCase(data, 4, win, true), ConvOut(data, 4, win), act);
    if (std::string(act) == "relu") c.init = UniformAwayFromZero;
    RunNnCase(c);
    RunNnCase(ChannelsLast(WithSum(ConvolutionCase(data, 4, win, true), ConvOut(data, 4, win), act),
                           ConvOut(data, 4, win)));
  }
  ExpectOpError("Convolution",
                {{"kernel", "(3, 3)"}, {"num_filter", "2"}, {"with_sum", "true"}, {"no_bias", "1"}},
                {Shape{1, 3, 5, 5}, Shape{2, 3, 3, 3}, Shape{1, 2, 3, 3}},
                {"'with_sum'", "a bias", "no_bias true"});
  ExpectOpError("Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "2"}, {"with_sum", "true"}},
                {Shape{1, 3, 5, 5}, Shape{2, 3, 3, 3}, Shape{2}, Shape{1, 2, 3, 1}},
                {"Convolution: sum must be the output's shape (1, 2, 3, 3), found (1, 2, 3, 1)"});
}

// ---- PyTorch's numbers for Convolution and Pooling ----

namespace torch_cases = conv_pool_torch_cases;

// The case's tensor `name`, or null.
const torch_cases::Tensor* TorchTensor(const torch_cases::Case& tc, const std::string& name) {
  for (const torch_cases::Tensor& t : tc.tensors) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

void ExpectRelativelyNear(const std::vector<double>& got, const torch_cases::Tensor& want,
                          double tolerance) {
  ASSERT_EQ(got.size(), want.values.size()) << want.name;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want.values[i], tolerance * std::max(1.0, std::abs(want.values[i])))
        << want.name << ", element " << i;
  }
}

// torch.nn.functional.conv2d (groups, dilation), avg_pool2d and max_pool2d (count_include_pad,
// ceil_mode) on the same inputs, made by tests/conv_pool_torch_cases.py: the outputs and the
// gradients of sum(y * gy), within 1e-5 relative in float32.
TEST(ConvolutionAndPooling, GivePyTorchsOutputsAndGradients) {
  for (const torch_cases::Case& tc : torch_cases::Cases()) {
    for (DType dtype : TestFloatTypes()) {
      SCOPED_TRACE(std::string(tc.name) + " " + std::string(DTypeName(dtype)));
      const double tol = dtype == DType::kFloat64 ? 1e-12 : 1e-5;
      const AttrMap attrs(tc.attrs.begin(), tc.attrs.end());
      std::vector<NDArray> in, grads;
      std::vector<const torch_cases::Tensor*> grad_want;
      for (const char* name : {"x", "w", "b"}) {
        const torch_cases::Tensor* t = TorchTensor(tc, name);
        if (t == nullptr) continue;
        const Shape shape(std::span(t->shape));
        in.push_back(FromDoubles(t->values, shape, dtype));
        grads.emplace_back(shape, TestDevice(), dtype);
        grad_want.push_back(TorchTensor(tc, std::string("d") + name));
      }
      const Op& op = GetOp(tc.op);
      const std::vector<NDArray> out = Invoke(op, ParseAttrs(op, attrs), in);
      ExpectRelativelyNear(AsDoubles(out[0]), *TorchTensor(tc, "y"), tol);
      const torch_cases::Tensor& gy = *TorchTensor(tc, "gy");
      InvokeBackward(op, ParseAttrs(op, attrs), in, out,
                     {FromDoubles(gy.values, Shape(std::span(gy.shape)), dtype)}, grads,
                     std::vector<OpReq>(in.size(), OpReq::kWrite));
      for (size_t i = 0; i < grads.size(); ++i)
        ExpectRelativelyNear(AsDoubles(grads[i]), *grad_want[i], tol);
    }
  }
}

// ---- softmax, log_softmax ----

// Along `axis` of a (2, 3, 4) input: exp(x) / sum(exp(x)), or x - log(sum(exp(x))).
OpCase SoftmaxCase(const std::string& op, int axis) {
  const Shape shape{2, 3, 4};
  const int a = axis < 0 ? axis + 3 : axis;
  int64_t stride = 1;
  for (int i = a + 1; i < 3; ++i) stride *= shape[i];
  const int64_t n = shape[a];
  OpCase c{op, {{"axis", std::to_string(axis)}}, {shape}, [=](const Inputs& in) {
             Values y(in[0].size());
             for (int64_t at = 0; at < static_cast<int64_t>(y.size()); ++at) {
               const int64_t first = at - (at / stride % n) * stride;  // this row's first element
               double sum = 0;
               for (int64_t k = 0; k < n; ++k) sum += std::exp(in[0][first + k * stride]);
               y[at] = op == "softmax" ? std::exp(in[0][at]) / sum : in[0][at] - std::log(sum);
             }
             return Outputs{y};
           }};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  c.name = op + " axis " + std::to_string(axis);
  return c;
}

TEST(Softmax, AlongTheLastAndTheFirstAxis) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int axis : {-1, 0, 1}) RunNnCase(SoftmaxCase(op, axis));
  }
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  for (DType dtype : TestFloatTypes()) {
    const NDArray x = FromDoubles({1000, 0, -1000}, Shape{1, 3}, dtype);
    const std::vector<double> probs = AsDoubles(Invoke("softmax", {x})[0]);
    const std::vector<double> logs = AsDoubles(Invoke("log_softmax", {x})[0]);
    // oneDNN's float32 exp and log are accurate to a few units in the last place.
    EXPECT_NEAR(probs[0], 1.0, 1e-5) << dtype;
    EXPECT_EQ(probs[2], 0.0) << dtype;
    EXPECT_NEAR(logs[0], 0.0, 1e-5) << dtype;
    EXPECT_NEAR(logs[1], -1000.0, 1e-3) << dtype;
  }
}

// Forward over data, backward over out_grad (req kWriteInplace): the results of separate outputs.
TEST(Softmax, RunsInPlace) {
  for (DType dtype : TestFloatTypes()) {
    for (const std::string op : {"softmax", "log_softmax"}) {
      NDArray x(Shape{3, 5}, TestDevice(), dtype), dy(Shape{3, 5}, TestDevice(), dtype);
      x.FillUniform(-2, 2);
      dy.FillUniform(-1, 1);
      const NDArray y = Invoke(op, {x})[0];
      const std::vector<double> want_y = AsDoubles(y);
      const std::vector<double> want_dx = AsDoubles(Invoke("_backward_" + op, {dy, y})[0]);
      Invoke(op, {x}, {}, {.outputs = {x}});
      Invoke("_backward_" + op, {dy, y}, {}, {.outputs = {dy}});
      EXPECT_EQ(AsDoubles(x), want_y) << op << " " << dtype;
      EXPECT_EQ(AsDoubles(dy), want_dx) << op << " " << dtype;
    }
  }
}

TEST(Softmax, BadInputsSayWhatWasExpected) {
  ExpectOpError("softmax", {{"axis", "3"}}, {Shape{2, 3, 4}},
                {"softmax", "axis 3 is out of range", "(2, 3, 4)"});
  ExpectOpError("log_softmax", {{"axis", "-4"}}, {Shape{2, 3, 4}},
                {"log_softmax", "axis -4", "(2, 3, 4)"});
  ExpectOpError("softmax", {{"axis", "last"}}, {Shape{2}}, {"softmax", "axis", "'last'"});
  ExpectOpError("log_softmax", {}, {Shape{2}, Shape{2}},
                {"log_softmax", "expected 1 input(s), found 2"});
}

// ---- SoftmaxCrossEntropy ----

TEST(SoftmaxCrossEntropy, IsMinusLogSoftmaxAtTheLabel) {
  const int64_t N = 6, C = 5;
  OpCase c{"SoftmaxCrossEntropy", {}, {Shape{N, C}, Shape{N}}, [=](const Inputs& in) {
             Values loss(N);
             for (int64_t n = 0; n < N; ++n) {
               double sum = 0;
               for (int64_t k = 0; k < C; ++k) sum += std::exp(in[0][n * C + k]);
               loss[n] = std::log(sum) - in[0][n * C + static_cast<int64_t>(in[1][n])];
             }
             return Outputs{loss};
           }};
  c.init = ClassIndices(1, C);
  c.no_gradient_inputs = {1};
  c.tolerance = kForwardTolerance;
  c.gradient_tolerance = kGradientTolerance;
  RunNnCase(c);
}

TEST(SoftmaxCrossEntropy, LargeLogitsDoNotOverflow) {
  for (DType dtype : TestFloatTypes()) {
    const NDArray x = FromDoubles({1000, 0, -1000, 0, 1000, 0}, Shape{2, 3}, dtype);
    const NDArray label = FromDoubles({0, 0}, Shape{2}, dtype);
    const std::vector<double> loss = AsDoubles(Invoke("SoftmaxCrossEntropy", {x, label})[0]);
    EXPECT_NEAR(loss[0], 0.0, 1e-6) << dtype;
    EXPECT_NEAR(loss[1], 1000.0, 1e-3) << dtype;
  }
}

TEST(SoftmaxCrossEntropy, LabelOutOfRangeSurfacesAtWaitToRead) {
  NDArray x(Shape{3, 4}, TestDevice());
  x.Fill(0);
  for (const std::vector<float>& labels :
       {std::vector<float>{0, 4, 1}, std::vector<float>{0, -1, 1},
        std::vector<float>{0, 1.5f, 1}}) {
    NDArray label = NDArray::FromVector(labels, Shape{3}, TestDevice());
    // The call itself succeeds: the labels are read when the op runs (on a GPU, by its kernel,
    // which reports the bad one through the op's completion).
    const NDArray loss = Invoke("SoftmaxCrossEntropy", {x, label})[0];
    const std::string message = ErrorAtWaitToRead(loss);
    std::ostringstream value;
    value << labels[1];
    EXPECT_NE(message.find("SoftmaxCrossEntropy"), std::string::npos) << message;
    EXPECT_NE(message.find("row 1 is " + value.str()), std::string::npos) << message;
    EXPECT_NE(message.find("[0, 4)"), std::string::npos) << message;
  }
}

// 16-bit logits (bfloat16; on a GPU float16 too) with float32 labels past 256: the loss and lse are
// float32, the gradient in the logits' dtype, and they are the float32 op's on the logits cast to
// float32 (its gradient rounded once to the logits' dtype): bit for bit on the CPU, whose loops
// read the row in the same order; within float32's rounding of the row's sum on a GPU, whose warps
// read 16-bit rows in wider packs. The cast a model puts before its loss changes nothing but the
// bytes it moves (GPT-2's logits: 8192 x 50304).
TEST(SoftmaxCrossEntropy, SixteenBitLogitsGiveTheFloat32OpsResults) {
  const int64_t N = 5, C = 300;
  const bool gpu = TestDevice().is_gpu();
  std::vector<DType> types = {DType::kBFloat16};
  if (gpu) types.push_back(DType::kFloat16);
  const NDArray label = ArrayOf({0, 299, 257, 3, 128}, Shape{N}, DType::kFloat32);
  const NDArray dy = ArrayOf(Uniform(N, 8, 0.5, 2), Shape{N}, DType::kFloat32);
  for (DType dtype : types) {
    const std::string name(DTypeName(dtype));
    SCOPED_TRACE(name);
    const NDArray x = ArrayOf(Uniform(N * C, 7, -4, 4), Shape{N, C}, dtype);
    const NDArray x32 = Invoke("Cast", {x}, {{"dtype", "float32"}})[0];
    const std::vector<NDArray> direct = Invoke("SoftmaxCrossEntropy", {x, label});
    const std::vector<NDArray> cast = Invoke("SoftmaxCrossEntropy", {x32, label});
    ASSERT_EQ(direct.size(), 2u);
    EXPECT_EQ(direct[0].dtype(), DType::kFloat32);
    EXPECT_EQ(direct[1].dtype(), DType::kFloat32);
    ExpectNear(ValuesOf(direct[0]), ValuesOf(cast[0]), gpu ? 1e-6 : 0, "loss");
    ExpectNear(ValuesOf(direct[1]), ValuesOf(cast[1]), gpu ? 1e-6 : 0, "lse");
    const NDArray dx = Invoke("_backward_SoftmaxCrossEntropy", {dy, x, label, direct[1]})[0];
    const NDArray dx32 = Invoke("_backward_SoftmaxCrossEntropy", {dy, x32, label, cast[1]})[0];
    EXPECT_EQ(dx.dtype(), dtype);
    const NDArray rounded = Invoke("Cast", {dx32}, {{"dtype", name}})[0];
    ExpectNear(ValuesOf(dx), ValuesOf(rounded), gpu ? 1.0 / 128 : 0, "d_data");
  }
}

TEST(SoftmaxCrossEntropy, LabelsOfAnotherDtypeSayWhatWasExpected) {
  for (const auto& [data, label, expected] :
       {std::tuple{DType::kFloat64, DType::kInt32,
                   "label must be float64 (the data's dtype) or "
                   "float32, found int32"},
        std::tuple{DType::kFloat32, DType::kFloat64, "label must be float32, found float64"}}) {
    try {
      Invoke("SoftmaxCrossEntropy",
             {NDArray(Shape{2, 3}, TestDevice(), data), NDArray(Shape{2}, TestDevice(), label)});
      ADD_FAILURE() << "no error for " << label << " labels";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(SoftmaxCrossEntropy, BadInputsSayWhatWasExpected) {
  ExpectOpError("SoftmaxCrossEntropy", {}, {Shape{4, 3}, Shape{4, 1}},
                {"SoftmaxCrossEntropy", "label must be (4,), found (4, 1)"});
  ExpectOpError("SoftmaxCrossEntropy", {}, {Shape{4, 3, 2}, Shape{4}},
                {"SoftmaxCrossEntropy", "(N, C)", "found (4, 3, 2)"});
  ExpectOpError("SoftmaxCrossEntropy", {}, {Shape{4, 3}},
                {"SoftmaxCrossEntropy", "expected 2 input(s), found 1"});
}

// ---- Output requests the harness does not cover ----

// `backward` called directly on random inputs of `shapes` (out_grad, data, weight), with d_data
// not requested (kNull), then with only d_data requested: what is not requested is left alone,
// and what is equals what a call that requests everything gives.
void ExpectUnrequestedGradientsLeftAlone(const std::string& backward, const AttrMap& attrs,
                                         const std::vector<Shape>& shapes,
                                         const std::vector<Shape>& grad_shapes) {
  for (DType dtype : TestFloatTypes()) {
    SCOPED_TRACE(backward + " " + std::string(DTypeName(dtype)));
    std::vector<NDArray> in;
    for (const Shape& s : shapes) in.emplace_back(s, TestDevice(), dtype);
    for (const NDArray& a : in) a.FillUniform(-1, 1);
    auto gradients = [&](std::vector<OpReq> req) {
      std::vector<NDArray> g;
      for (const Shape& s : grad_shapes) g.emplace_back(s, TestDevice(), dtype);
      for (const NDArray& a : g) a.Fill(7);
      Invoke(backward, in, attrs, {.outputs = g, .req = req});
      return g;
    };
    const OpReq w = OpReq::kWrite, null = OpReq::kNull;
    const std::vector<NDArray> all = gradients({w, w, w}), weights = gradients({null, w, w}),
                               data = gradients({w, null, null});
    for (size_t i = 0; i < grad_shapes.size(); ++i) {
      const std::vector<double> untouched(grad_shapes[i].Size(), 7.0);
      EXPECT_NE(AsDoubles(all[i]), untouched) << i;
      EXPECT_EQ(AsDoubles(i == 0 ? weights[i] : data[i]), untouched) << i;
      EXPECT_EQ(AsDoubles(i == 0 ? data[i] : weights[i]), AsDoubles(all[i])) << i;
    }
  }
}

TEST(OutputRequests, NullGradientsAreLeftAloneAndTheOthersStillComputed) {
  ExpectUnrequestedGradientsLeftAlone("_backward_FullyConnected", {{"num_hidden", "3"}},
                                      {Shape{4, 3}, Shape{4, 5}, Shape{3, 5}},
                                      {Shape{4, 5}, Shape{3, 5}, Shape{3}});
  const AttrMap conv = {{"kernel", "(3, 2)"},
                        {"dilate", "(2, 1)"},
                        {"pad", "(1, 1)"},
                        {"num_filter", "4"},
                        {"num_group", "2"}};
  // data (2, 4, 6, 5): 6 + 2 - 5 + 1 = 4 rows, 5 + 2 - 2 + 1 = 6 columns.
  ExpectUnrequestedGradientsLeftAlone("_backward_Convolution", conv,
                                      {Shape{2, 4, 4, 6}, Shape{2, 4, 6, 5}, Shape{4, 2, 3, 2}},
                                      {Shape{2, 4, 6, 5}, Shape{4, 2, 3, 2}, Shape{4}});
}

// ---- The primitive cache ----

TEST(PrimitiveCache, SecondCallWithTheSameShapesReusesThePrimitive) {
  if (TestDevice().is_gpu()) GTEST_SKIP() << "oneDNN's primitive cache serves the CPU operators";
  // Shapes no other test uses, so the first call creates the primitive.
  NDArray x(Shape{3, 17}, TestDevice()), w(Shape{11, 17}, TestDevice()), b(Shape{11}, TestDevice());
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
  NDArray other_batch(Shape{5, 17}, TestDevice());
  other_batch.Fill(1);
  Invoke("FullyConnected", {other_batch, w, b}, attrs)[0].WaitToRead();
  EXPECT_EQ(cpu::GetPrimitiveCacheStats().misses, second.misses + 1);
  EXPECT_EQ(Invoke("FullyConnected", {x, w, b}, attrs)[0].ToVector<float>(), y1);
}

// Independent calls of one shape: the engine may run them on several workers at once, all on
// the one cached primitive, each with the scratchpad from its own worker's workspace.
TEST(PrimitiveCache, ConcurrentCallsOnOnePrimitiveGiveTheSerialResults) {
  NDArray w(Shape{16, 32}, TestDevice()), b(Shape{16}, TestDevice());
  w.FillUniform(-1, 1);
  b.FillUniform(-1, 1);
  std::vector<NDArray> xs;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 8; ++i) {
    xs.emplace_back(Shape{8, 32}, TestDevice());
    xs.back().FillUniform(-1, 1);
    want.push_back(
        Invoke("FullyConnected", {xs.back(), w, b}, {{"num_hidden", "16"}})[0].ToVector<float>());
  }
  std::vector<NDArray> ys;
  for (int round = 0; round < 4; ++round) {
    for (const NDArray& x : xs)
      ys.push_back(Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "16"}})[0]);
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    const std::vector<float> got = ys[i].ToVector<float>();
    const std::vector<float>& expected = want[i % xs.size()];
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_NEAR(got[k], expected[k], 1e-5) << "call " << i << ", element " << k;
  }
}

}  // namespace
}  // namespace weft::testing
