// Elementwise ops: unary functions and their scalar forms, Activation, clip, gelu's two formulas,
// broadcasting binary ops, where, add_n. Each case runs forward (req write and add) against a plain
// reference and checks the gradient against finite differences (see op_test_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "ops/op.h"
#include "storage/ndarray.h"
#include "tests/op_test_util.h"
#include "tests/pointwise_torch_cases.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;

double GeluExact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

OpCase Unary(const std::string& op, std::function<double(double)> f, AttrMap attrs = {}) {
  OpCase c{op, attrs, {Shape{3, 5}}, [f](const Inputs& in) {
             Values y(in[0].size());
             for (size_t i = 0; i < y.size(); ++i) y[i] = f(in[0][i]);
             return Outputs{y};
           }};
  return c;
}

TEST(ElementwiseOps, UnaryFunctionsMatchTheirDefinitions) {
  const std::vector<std::pair<std::string, std::function<double(double)>>> smooth = {
      {"neg", [](double x) { return -x; }},
      {"exp", [](double x) { return std::exp(x); }},
      {"square", [](double x) { return x * x; }},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"softrelu", [](double x) { return std::log1p(std::exp(x)); }},
      {"erf", [](double x) { return std::erf(x); }},
      {"gelu", GeluExact},
      {"gelu_tanh", GeluTanh},
  };
  for (const auto& [op, f] : smooth) RunOpCase(Unary(op, f));
  for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<double(double)>>>{
           {"log", [](double x) { return std::log(x); }},
           {"sqrt", [](double x) { return std::sqrt(x); }}}) {
    OpCase c = Unary(op, f);
    c.init = Positive;
    RunOpCase(c);
  }
  for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<double(double)>>>{
           {"abs", [](double x) { return std::abs(x); }},
           {"relu", [](double x) { return x > 0 ? x : 0; }}}) {
    OpCase c = Unary(op, f);
    c.init = UniformAwayFromZero;
    RunOpCase(c);
  }
  // relu6 over (-8, 8), off its kinks at 0 and 6: both bounds act
  OpCase relu6 = Unary("relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); });
  relu6.init = [](int, Values& v) {
    for (double& x : v) {
      x *= 8;
      if (std::abs(x) < 0.2 || std::abs(x - 6) < 0.2) x += 0.5;
    }
  };
  RunOpCase(relu6);
}

// gelu's attribute `approximate` picks the formula, as PyTorch's: none (the default) or tanh.
TEST(ElementwiseOps, GeluApproximatePicksTheFormula) {
  OpCase exact = Unary("gelu", GeluExact, {{"approximate", "none"}});
  exact.name = "gelu(approximate=none)";
  RunOpCase(exact);
  OpCase tanh = Unary("gelu", GeluTanh, {{"approximate", "tanh"}});
  tanh.init = [](int, Values& v) {
    for (double& x : v) x *= 3;  // where the two formulas differ by more than the tolerance
  };
  tanh.name = "gelu(approximate=tanh)";
  RunOpCase(tanh);
}

TEST(ElementwiseOps, ScalarForms) {
  RunOpCase(Unary("add_scalar", [](double x) { return x + 0.5; }, {{"scalar", "0.5"}}));
  RunOpCase(Unary("sub_scalar", [](double x) { return x - 0.5; }, {{"scalar", "0.5"}}));
  RunOpCase(Unary("rsub_scalar", [](double x) { return 0.5 - x; }, {{"scalar", "0.5"}}));
  RunOpCase(Unary("mul_scalar", [](double x) { return x * -3; }, {{"scalar", "-3"}}));
  RunOpCase(Unary("div_scalar", [](double x) { return x / 4; }, {{"scalar", "4"}}));
  OpCase rdiv = Unary("rdiv_scalar", [](double x) { return 2 / x; }, {{"scalar", "2"}});
  rdiv.init = Positive;
  RunOpCase(rdiv);
  OpCase mx = Unary("maximum_scalar", [](double x) { return std::max(x, 0.0); }, {{"scalar", "0"}});
  mx.init = UniformAwayFromZero;
  RunOpCase(mx);
  OpCase mn = Unary("minimum_scalar", [](double x) { return std::min(x, 0.0); }, {{"scalar", "0"}});
  mn.init = UniformAwayFromZero;
  RunOpCase(mn);
}

TEST(ElementwiseOps, ActivationCoversEveryType) {
  const std::vector<std::pair<std::string, std::function<double(double)>>> acts = {
      {"relu", [](double x) { return x > 0 ? x : 0; }},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"softrelu", [](double x) { return std::log1p(std::exp(x)); }},
      {"gelu", GeluExact},
      {"gelu_tanh", GeluTanh},
  };
  for (const auto& [act, f] : acts) {
    OpCase c = Unary("Activation", f, {{"act_type", act}});
    c.init = UniformAwayFromZero;
    c.name = "Activation(" + act + ")";
    RunOpCase(c);
  }
}

// clip(x, lo, hi) on inputs spread over [-2 * scale, 2 * scale), none within 0.05 * scale of a
// bound (where the finite differences would straddle the kink).
OpCase ClipCase(double lo, double hi, double scale) {
  OpCase c = Unary("clip", [lo, hi](double x) { return std::min(std::max(x, lo), hi); },
                   {{"a_min", FloatAttr(lo)}, {"a_max", FloatAttr(hi)}});
  c.init = [lo, hi, scale](int, Values& v) {
    for (double& x : v) {
      x *= 2 * scale;
      for (double bound : {lo, hi}) {
        if (std::abs(x - bound) < 0.05 * scale) x = bound + (x < bound ? -0.05 : 0.05) * scale;
      }
    }
  };
  c.name = "clip(" + FloatAttr(lo) + ", " + FloatAttr(hi) + ")";
  return c;
}

TEST(ElementwiseOps, ClipBoundsItsInput) {
  RunOpCase(ClipCase(-0.5, 0.25, 1));
  RunOpCase(ClipCase(0, 6, 4));  // ReLU6
  RunOpCase(ClipCase(-1, -1, 1));
}

// At a bound the gradient passes (PyTorch's clamp; MXNet's clip too), outside it does not, and NaN
// stays NaN with no gradient.
TEST(ElementwiseOps, ClipPassesTheGradientAtItsBounds) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const AttrMap attrs = {{"a_min", "-1"}, {"a_max", "2"}};
  for (DType dtype : TestFloatTypes()) {
    const std::vector<double> x = {-1, 2, -1.5, 2.5, 0.5, nan};
    const Shape shape{static_cast<int64_t>(x.size())};
    NDArray xs = Invoke("Cast", {NDArray::FromVector(x, shape)},
                        {{"dtype", std::string(DTypeName(dtype))}})[0];
    xs = xs.Copy(TestDevice());
    NDArray dy(shape, TestDevice(), dtype);
    dy.Fill(3);
    auto values = [](const NDArray& a) {
      return Invoke("Cast", {a.Copy(Device::Cpu())}, {{"dtype", "float64"}})[0].ToVector<double>();
    };
    const std::vector<double> y = values(Invoke("clip", {xs}, attrs)[0]);
    const std::vector<double> dx = values(Invoke("_backward_clip", {dy, xs}, attrs)[0]);
    const std::vector<double> want_y = {-1, 2, -1, 2, 0.5}, want_dx = {3, 3, 0, 0, 3, 0};
    for (size_t i = 0; i < want_y.size(); ++i) EXPECT_EQ(y[i], want_y[i]) << dtype << " " << i;
    EXPECT_TRUE(std::isnan(y.back())) << dtype;
    EXPECT_EQ(dx, want_dx) << dtype;
  }
}

// lhs (2, 3, 4) op rhs of various broadcastable shapes.
OpCase Binary(const std::string& op, std::function<double(double, double)> f, Shape lhs,
              Shape rhs) {
  OpCase c{op, {}, {lhs, rhs}, [f, lhs, rhs](const Inputs& in) {
             // Reference broadcasting: index each operand by the output's coordinates.
             const int n = std::max(lhs.ndim(), rhs.ndim());
             Shape out;
             for (int i = 0; i < n; ++i) {
               int64_t a = i - (n - lhs.ndim()) >= 0 ? lhs[i - (n - lhs.ndim())] : 1;
               int64_t b = i - (n - rhs.ndim()) >= 0 ? rhs[i - (n - rhs.ndim())] : 1;
               out.PushBack(std::max(a, b));
             }
             auto offset = [&](const Shape& s, const std::vector<int64_t>& coord) {
               int64_t off = 0;
               for (int i = 0; i < s.ndim(); ++i) {
                 int64_t c = coord[n - s.ndim() + i];
                 off = off * s[i] + (s[i] == 1 ? 0 : c);
               }
               return off;
             };
             Values y(out.Size());
             std::vector<int64_t> coord(n);
             for (int64_t o = 0; o < out.Size(); ++o) {
               int64_t rem = o;
               for (int i = n - 1; i >= 0; --i) coord[i] = rem % out[i], rem /= out[i];
               y[o] = f(in[0][offset(lhs, coord)], in[1][offset(rhs, coord)]);
             }
             return Outputs{y};
           }};
  c.name = op + " " + lhs.ToString() + " " + rhs.ToString();
  return c;
}

TEST(ElementwiseOps, BinaryOpsBroadcast) {
  const std::vector<std::pair<std::string, std::function<double(double, double)>>> ops = {
      {"add", [](double a, double b) { return a + b; }},
      {"sub", [](double a, double b) { return a - b; }},
      {"mul", [](double a, double b) { return a * b; }},
      {"div", [](double a, double b) { return a / b; }},
      {"maximum", [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](double a, double b) { return std::min(a, b); }},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3, 4}, {2, 3, 4}},
                                                       {{2, 3, 4}, {4}},
                                                       {{2, 3, 4}, {3, 1}},
                                                       {{2, 1, 4}, {1, 3, 1}},
                                                       {{1}, {2, 3}},
                                                       // a weight times a per-channel scale
                                                       {{4, 3, 2, 2}, {4, 1, 1, 1}},
                                                       {{3, 1, 5}, {1, 1, 5}},
                                                       {{2, 3, 4}, {2, 3, 1}}};
  for (const auto& [op, f] : ops) {
    for (const auto& [lhs, rhs] : shapes) {
      OpCase c = Binary(op, f, lhs, rhs);
      if (op == "div") {
        c.init = [](int i, Values& v) {
          if (i == 1) Positive(i, v);
        };
      }
      if (op == "maximum" || op == "minimum") {  // keep operands apart: no ties at the kink
        c.init = [](int i, Values& v) {
          for (double& x : v) x = i == 0 ? x : x + (x > 0 ? 0.05 : -0.05);
        };
        c.init = [](int i, Values& v) {
          for (size_t k = 0; k < v.size(); ++k) v[k] = i == 0 ? v[k] * 0.5 : (k % 2 ? 0.8 : -0.8);
        };
      }
      RunOpCase(c);
    }
  }
}

// where(condition, a, b) broadcasting all three: the reference indexes each by the output's
// coordinates. condition is 0 or 1 (no gradient: it is piecewise constant); a and b get theirs.
OpCase WhereCase(const std::vector<Shape>& shapes) {
  int n = 0;
  for (const Shape& s : shapes) n = std::max(n, s.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    int64_t e = 1;
    for (const Shape& s : shapes)
      e = std::max(e, i - (n - s.ndim()) >= 0 ? s[i - (n - s.ndim())] : 1);
    out.PushBack(e);
  }
  OpCase c{"where", {}, shapes, [shapes, out, n](const Inputs& in) {
             auto offset = [&](const Shape& s, const std::vector<int64_t>& coord) {
               int64_t off = 0;
               for (int i = 0; i < s.ndim(); ++i)
                 off = off * s[i] + (s[i] == 1 ? 0 : coord[n - s.ndim() + i]);
               return off;
             };
             Values y(out.Size());
             std::vector<int64_t> coord(n);
             for (int64_t o = 0; o < out.Size(); ++o) {
               int64_t rem = o;
               for (int i = n - 1; i >= 0; --i) coord[i] = rem % out[i], rem /= out[i];
               const double cond = in[0][offset(shapes[0], coord)];
               y[o] = cond != 0 ? in[1][offset(shapes[1], coord)] : in[2][offset(shapes[2], coord)];
             }
             return Outputs{y};
           }};
  c.init = [](int i, Values& v) {
    if (i != 0) return;
    for (size_t k = 0; k < v.size(); ++k) v[k] = (k * 7 + 3) % 5 < 2 ? 0 : 1;
  };
  c.no_gradient_inputs = {0};
  c.name =
      "where " + shapes[0].ToString() + " " + shapes[1].ToString() + " " + shapes[2].ToString();
  return c;
}

TEST(ElementwiseOps, WherePicksByConditionWithBroadcasting) {
  RunOpCase(WhereCase({Shape{3, 4}, Shape{3, 4}, Shape{3, 4}}));
  RunOpCase(WhereCase({Shape{3, 4}, Shape{4}, Shape{3, 1}}));
  RunOpCase(WhereCase({Shape{1, 4, 4}, Shape{2, 1, 4}, Shape{1}}));  // a causal-mask shape
  RunOpCase(WhereCase({Shape{2, 1}, Shape{2, 3}, Shape{2, 3}}));
}

// A NaN condition is nonzero (numpy's where picks a), as are negative values.
TEST(ElementwiseOps, WhereTakesEveryNonzeroConditionAsTrue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : TestFloatTypes()) {
    const Values c = {0, 1, -2, nan, -0.0};
    const NDArray y =
        Invoke("where", {ArrayOf(c, Shape{5}, dtype), ArrayOf({1, 2, 3, 4, 5}, Shape{5}, dtype),
                         ArrayOf({-1, -2, -3, -4, -5}, Shape{5}, dtype)})[0];
    EXPECT_EQ(ValuesOf(y), (Values{-1, 2, 3, 4, -5})) << dtype;
  }
}

TEST(ElementwiseOps, AddNSumsItsInputs) {
  OpCase c{
      "add_n", {{"num_args", "3"}}, {Shape{4, 3}, Shape{4, 3}, Shape{4, 3}}, [](const Inputs& in) {
        Values y(in[0].size());
        for (size_t i = 0; i < y.size(); ++i) y[i] = in[0][i] + in[1][i] + in[2][i];
        return Outputs{y};
      }};
  RunOpCase(c);
}

// ---- PyTorch ----

// erf, both gelus, where, take and split on the inputs of tests/pointwise_torch_cases.py: the
// outputs and the gradients of sum(y * gy), in every dtype TestDevice() tests.
TEST(PointwiseOps, GivePyTorchsOutputsAndGradients) {
  for (const pointwise_torch::Case& tc : pointwise_torch::Cases()) {
    const Op& op = GetOp(tc.op);
    AttrMap attrs;
    for (const auto& [k, v] : tc.attrs) attrs[k] = v;
    const Attrs parsed = ParseAttrs(op, attrs);
    for (DType t : TestFloatTypes()) {
      const std::string what = std::string(tc.name) + " " + DTypeName(t).data();
      const double tol = t == DType::kFloat64 ? 1e-12 : 1e-5;
      std::vector<NDArray> in, heads, grads;
      std::vector<OpReq> req;
      for (const auto& x : tc.inputs) in.push_back(ArrayOf(x.values, Shape(std::span(x.shape)), t));
      for (const auto& g : tc.head_grads)
        heads.push_back(ArrayOf(g.values, Shape(std::span(g.shape)), t));
      for (size_t i = 0; i < tc.inputs.size(); ++i) {
        grads.push_back(NDArray(in[i].shape(), TestDevice(), t));
        req.push_back(tc.input_grads[i].values.empty() ? OpReq::kNull : OpReq::kWrite);
      }
      const std::vector<NDArray> out = Invoke(op, parsed, in);
      ASSERT_EQ(out.size(), tc.outputs.size()) << what;
      for (size_t k = 0; k < out.size(); ++k)
        ExpectNear(ValuesOf(out[k]), tc.outputs[k].values, tol, what + " output");
      InvokeBackward(op, parsed, in, out, heads, grads, req);
      for (size_t i = 0; i < grads.size(); ++i) {
        if (req[i] == OpReq::kNull) continue;
        ExpectNear(ValuesOf(grads[i]), tc.input_grads[i].values, tol,
                   what + " gradient of input " + std::to_string(i));
      }
    }
  }
}

TEST(ElementwiseOps, BadInputsSayWhatWasExpected) {
  ExpectOpError("add", {}, {Shape{2, 3}, Shape{4}},
                {"cannot be broadcast", "(2, 3)", "(4,)", "'add'"});
  ExpectOpError("mul", {}, {Shape{2, 3}}, {"'mul'", "expected 2 input(s), found 1"});
  ExpectOpError("add_n", {{"num_args", "2"}}, {Shape{2}, Shape{3}}, {"add_n", "(2,)", "(3,)"});
  ExpectOpError("add_n", {{"num_args", "0"}}, {}, {"num_args", "found '0'"});
  ExpectOpError("Activation", {{"act_type", "swish"}}, {Shape{2}},
                {"act_type", "'swish'", "'relu'"});
  ExpectOpError("Activation", {}, {Shape{2}}, {"act_type", "required"});
  ExpectOpError("relu", {{"alpha", "1"}}, {Shape{2}}, {"unknown attribute 'alpha'"});
  ExpectOpError("mul_scalar", {{"scalar", "two"}}, {Shape{2}}, {"scalar", "a number", "'two'"});
  ExpectOpError("rleu", {}, {Shape{2}}, {"unknown op 'rleu'", "did you mean 'relu'"});
  ExpectOpError("clip", {{"a_min", "1"}, {"a_max", "0.5"}}, {Shape{2}},
                {"clip", "a_min <= a_max", "found 1 and 0.5"});
  ExpectOpError("clip", {{"a_min", "0"}}, {Shape{2}}, {"clip", "a_max", "required"});
  ExpectOpError("gelu", {{"approximate", "sigmoid"}}, {Shape{2}},
                {"gelu", "approximate", "'sigmoid'", "'tanh'"});
  for (const char* op : {"neg", "exp", "log", "sqrt", "square", "abs", "sigmoid", "tanh",
                         "softrelu", "erf", "gelu", "gelu_tanh"}) {
    ExpectOpError(op, {}, {Shape{2}, Shape{2}}, {op, "expected 1 input(s), found 2"});
  }
  for (const char* op : {"sub", "div", "maximum", "minimum"}) {
    ExpectOpError(op, {}, {Shape{3}, Shape{2}}, {op, "cannot be broadcast"});
  }
  ExpectOpError("where", {}, {Shape{2, 3}, Shape{3}, Shape{4}},
                {"where: condition (2, 3), a (3,) and b (4,) cannot be broadcast together"});
  ExpectOpError("where", {}, {Shape{3}, Shape{3}}, {"'where'", "expected 3 input(s), found 2"});
}

}  // namespace
}  // namespace weft::testing
