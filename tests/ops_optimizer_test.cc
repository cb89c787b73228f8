// Optimizer update ops write the weights (and their state) in place, and match a plain
// reference over several steps, with gradient rescaling, clipping and weight decay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "storage/ndarray.h"
#include "tests/op_test_util.h"
#include "weft/imperative.h"

namespace weft {
namespace {

std::vector<float> Gradients(int step) {
  return {0.5f * step, -2.0f, 0.01f, 3.0f - step, -0.3f, 1.5f};
}

float Clipped(float g, float rescale, float clip) {
  g *= rescale;
  return clip > 0 ? std::max(-clip, std::min(clip, g)) : g;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "element " << i;
}

TEST(OptimizerOps, SgdUpdatesTheWeightInPlace) {
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  NDArray weight = NDArray::FromVector(w, Shape{2, 3}, testing::TestDevice());
  const AttrMap attrs = {
      {"lr", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.6"}};
  for (int step = 0; step < 3; ++step) {
    NDArray grad = NDArray::FromVector(Gradients(step), Shape{2, 3}, testing::TestDevice());
    std::vector<NDArray> out = Invoke("sgd_update", {weight, grad}, attrs, {.outputs = {weight}});
    EXPECT_TRUE(out[0].SharesMemoryWith(weight));
    for (size_t i = 0; i < w.size(); ++i)
      w[i] -= 0.1f * (Clipped(Gradients(step)[i], 0.5f, 0.6f) + 0.01f * w[i]);
  }
  ExpectNear(weight.ToVector<float>(), w);
}

TEST(OptimizerOps, SgdMomentumUpdatesWeightAndMomentum) {
  std::vector<float> w = {1, -2, 3, -4, 5, -6}, m(6, 0.0f);
  NDArray weight = NDArray::FromVector(w, Shape{6}, testing::TestDevice()),
          mom = NDArray::FromVector(m, Shape{6}, testing::TestDevice());
  const AttrMap attrs = {{"lr", "0.05"}, {"momentum", "0.9"}, {"wd", "0.001"}};
  for (int step = 0; step < 4; ++step) {
    NDArray grad = NDArray::FromVector(Gradients(step), Shape{6}, testing::TestDevice());
    Invoke("sgd_mom_update", {weight, grad, mom}, attrs, {.outputs = {weight}});
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = 0.9f * m[i] - 0.05f * (Gradients(step)[i] + 0.001f * w[i]);
      w[i] += m[i];
    }
  }
  ExpectNear(weight.ToVector<float>(), w);
  ExpectNear(mom.ToVector<float>(), m);
}

TEST(OptimizerOps, AdamUpdatesWeightAndBothMoments) {
  std::vector<float> w = {0.5f, -0.5f, 1, -1, 2, -2}, m(6, 0.0f), v(6, 0.0f);
  NDArray weight = NDArray::FromVector(w, Shape{3, 2}, testing::TestDevice()),
          mean = NDArray::FromVector(m, Shape{3, 2}, testing::TestDevice()),
          var = NDArray::FromVector(v, Shape{3, 2}, testing::TestDevice());
  const AttrMap attrs = {{"lr", "0.01"},
                         {"beta1", "0.8"},
                         {"beta2", "0.99"},
                         {"epsilon", "1e-6"},
                         {"clip_gradient", "2"}};
  for (int step = 0; step < 5; ++step) {
    NDArray grad = NDArray::FromVector(Gradients(step), Shape{3, 2}, testing::TestDevice());
    Invoke("adam_update", {weight, grad, mean, var}, attrs, {.outputs = {weight}});
    for (size_t i = 0; i < w.size(); ++i) {
      const float g = Clipped(Gradients(step)[i], 1.0f, 2.0f);
      m[i] = 0.8f * m[i] + 0.2f * g;
      v[i] = 0.99f * v[i] + 0.01f * g * g;
      w[i] -= 0.01f * m[i] / (std::sqrt(v[i]) + 1e-6f);
    }
  }
  ExpectNear(weight.ToVector<float>(), w);
  ExpectNear(mean.ToVector<float>(), m);
  ExpectNear(var.ToVector<float>(), v);
}

TEST(OptimizerOps, BadInputsSayWhatWasExpected) {
  testing::ExpectOpError("sgd_update", {}, {Shape{3}, Shape{3}},
                         {"sgd_update", "'lr'", "required"});
  testing::ExpectOpError("sgd_update", {{"lr", "0.1"}}, {Shape{3}, Shape{4}},
                         {"sgd_update", "(3,)", "(4,)"});
  testing::ExpectOpError("sgd_update", {{"lr", "-1"}}, {Shape{3}, Shape{3}},
                         {"sgd_update", "lr", ">= 0", "-1"});
  testing::ExpectOpError("sgd_mom_update", {{"lr", "0.1"}}, {Shape{3}, Shape{3}},
                         {"sgd_mom_update", "expected 3 input(s), found 2"});
  testing::ExpectOpError("adam_update", {{"lr", "0.1"}, {"beta1", "1.5"}},
                         {Shape{2}, Shape{2}, Shape{2}, Shape{2}}, {"adam_update", "beta1", "1.5"});
  testing::ExpectOpError("adam_update", {{"lr", "0.1"}, {"momentum", "0.9"}},
                         {Shape{2}, Shape{2}, Shape{2}, Shape{2}},
                         {"adam_update", "unknown attribute 'momentum'"});
}

// With lr_input=true the rates are the last input (float64, on the weight's device: lr, then
// AdamW's decay_rate): over several steps with different rates each, every update gives bit for
// bit what the same rates as attributes give, weight and state.
TEST(OptimizerOps, TheLearningRateAsAnInputGivesWhatTheAttributeGives) {
  const Device d = testing::TestDevice();
  const std::vector<std::pair<std::string, AttrMap>> updates = {
      {"sgd_update", {{"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.6"}}},
      {"sgd_mom_update", {{"momentum", "0.9"}, {"wd", "0.001"}}},
      {"adam_update", {{"beta1", "0.8"}, {"beta2", "0.99"}, {"clip_gradient", "2"}}},
      {"adamw_update", {{"beta1", "0.8"}, {"wd", "0.1"}, {"clip_gradient", "2"}}}};
  const std::vector<double> rates = {0.1, 0.0371, 1.0 / 3};
  for (const auto& [op, attrs] : updates) {
    const int states = op == "sgd_update" ? 0 : op == "sgd_mom_update" ? 1 : 2;
    const bool adamw = op == "adamw_update";
    std::vector<NDArray> by_attr, by_input;  // weight, then states
    for (int k = 0; k <= states; ++k) {
      const std::vector<float> init = {0.5f, -1, 2, 0.25f, 3, -0.75f};
      by_attr.push_back(NDArray::FromVector(init, Shape{2, 3}, d));
      by_input.push_back(NDArray::FromVector(init, Shape{2, 3}, d));
      if (k > 0) by_attr[k].Fill(0.1 * k), by_input[k].Fill(0.1 * k);
    }
    AttrMap with_input = attrs;
    with_input["lr_input"] = "true";
    for (int step = 0; step < 3; ++step) {
      NDArray grad = NDArray::FromVector(Gradients(step), Shape{2, 3}, d);
      AttrMap with_attr = attrs;
      with_attr["lr"] = std::to_string(rates[step]);
      std::vector<double> lr_values = {std::stod(with_attr["lr"])};
      if (adamw) {
        with_attr["decay_rate"] = std::to_string(2 * rates[step]);
        lr_values.push_back(std::stod(with_attr["decay_rate"]));
      }
      const NDArray lr = NDArray::FromVector(lr_values, Shape{adamw ? 2 : 1}, d);
      std::vector<NDArray> in_attr = {by_attr[0], grad}, in_input = {by_input[0], grad};
      for (int k = 1; k <= states; ++k)
        in_attr.push_back(by_attr[k]), in_input.push_back(by_input[k]);
      in_input.push_back(lr);
      Invoke(op, in_attr, with_attr, {.outputs = {by_attr[0]}});
      Invoke(op, in_input, with_input, {.outputs = {by_input[0]}});
    }
    for (int k = 0; k <= states; ++k) {
      EXPECT_EQ(by_input[k].ToVector<float>(), by_attr[k].ToVector<float>())
          << op << ", array " << k;
    }
    EXPECT_NE(by_input[0].ToVector<float>(), (std::vector<float>{0.5f, -1, 2, 0.25f, 3, -0.75f}))
        << op;
  }
}

// Runs `call`, which must throw weft::Error with every one of `parts` in its message.
void ExpectCallError(const std::function<void()>& call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one with: " << parts[0];
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(OptimizerOps, ALearningRateInputMustBeOneFloat64AndComeAlone) {
  const Device d = testing::TestDevice();
  NDArray w(Shape{3}, d), g(Shape{3}, d), lr(Shape{1}, d, DType::kFloat64),
      lr2(Shape{2}, d, DType::kFloat64), lr32(Shape{1}, d);
  for (const NDArray& a : {w, g, lr, lr2, lr32}) a.Fill(0);
  ExpectCallError(
      [&] {
        Invoke("sgd_update", {w, g, lr}, {{"lr_input", "true"}, {"lr", "0.1"}}, {.outputs = {w}});
      },
      {"sgd_update", "'lr'", "expected none with lr_input=true", "0.1"});
  ExpectCallError(
      [&] {
        Invoke("sgd_update", {w, g, lr2}, {{"lr_input", "true"}}, {.outputs = {w}});
      },
      {"sgd_update", "learning rate (input 2)", "one element", "(2,)"});
  ExpectCallError(
      [&] {
        Invoke("sgd_update", {w, g, lr32}, {{"lr_input", "true"}}, {.outputs = {w}});
      },
      {"sgd_update", "learning rate (input 2)", "float64", "float32"});
  ExpectCallError(
      [&] {
        Invoke("sgd_update", {w, g}, {{"lr_input", "true"}}, {.outputs = {w}});
      },
      {"sgd_update", "expected 3 input(s), found 2"});
  NDArray m(Shape{3}, d), v(Shape{3}, d);
  for (const NDArray& a : {m, v}) a.Fill(0);
  ExpectCallError(
      [&] {
        Invoke("adamw_update", {w, g, m, v, lr}, {{"lr_input", "true"}}, {.outputs = {w}});
      },
      {"adamw_update", "rates (input 4)", "2 elements (lr, decay_rate)", "(1,)"});
  ExpectCallError(
      [&] {
        Invoke("adamw_update", {w, g, m, v, lr2}, {{"lr_input", "true"}, {"decay_rate", "0.1"}},
               {.outputs = {w}});
      },
      {"adamw_update", "'decay_rate'", "expected none with lr_input=true"});
}

// One step of each update as a declarative case (tests/op_test_util.h): the output is the
// updated weight, against the same formulas as above; the updates have no gradient.
testing::OpCase UpdateCase(const std::string& op, const AttrMap& attrs, int inputs,
                           std::function<double(const testing::Values& in)> step) {
  auto reference = [inputs, step](const testing::Inputs& x) {
    testing::Values y(x[0].size());
    for (size_t i = 0; i < y.size(); ++i) {
      testing::Values at;  // element i of every input
      for (int k = 0; k < inputs; ++k) at.push_back(x[k][i]);
      y[i] = step(at);
    }
    return testing::Outputs{y};
  };
  testing::OpCase c{op, attrs, std::vector<Shape>(inputs, Shape{2, 3}), reference};
  c.check_gradient = false;
  return c;
}

double ClippedGrad(double g, double rescale, double clip) {
  return std::max(-clip, std::min(clip, g * rescale));
}

TEST(OptimizerOps, OneStepOfEachUpdateMatchesItsFormula) {
  const AttrMap sgd = {
      {"lr", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.3"}};
  testing::RunOpCase(UpdateCase("sgd_update", sgd, 2, [](const testing::Values& in) {
    return in[0] - 0.1 * (ClippedGrad(in[1], 0.5, 0.3) + 0.01 * in[0]);
  }));
  testing::RunOpCase(
      UpdateCase("sgd_mom_update", {{"lr", "0.05"}, {"momentum", "0.9"}}, 3,
                 [](const testing::Values& in) { return in[0] + 0.9 * in[2] - 0.05 * in[1]; }));
  testing::OpCase adam =
      UpdateCase("adam_update", {{"lr", "0.01"}, {"beta1", "0.8"}, {"beta2", "0.99"}}, 4,
                 [](const testing::Values& in) {
                   const double m = 0.8 * in[2] + 0.2 * in[1];
                   const double v = 0.99 * in[3] + 0.01 * in[1] * in[1];
                   return in[0] - 0.01 * m / (std::sqrt(v) + 1e-8);
                 });
  adam.init = [](int i, testing::Values& v) {
    if (i == 3) testing::Positive(i, v);  // a variance
  };
  testing::RunOpCase(adam);
  // AdamW: the weight decays at decay_rate (lr when not given), apart from the gradient.
  testing::OpCase adamw = UpdateCase(
      "adamw_update", {{"lr", "0.01"}, {"decay_rate", "0.02"}, {"wd", "0.1"}, {"beta2", "0.99"}}, 4,
      [](const testing::Values& in) {
        const double m = 0.9 * in[2] + 0.1 * in[1];
        const double v = 0.99 * in[3] + 0.01 * in[1] * in[1];
        return in[0] * (1 - 0.02 * 0.1) - 0.01 * m / (std::sqrt(v) + 1e-8);
      });
  adamw.init = adam.init;
  testing::RunOpCase(adamw);
}

// ---- amp_update_scale (the dynamic loss scaler's step) ----

// amp_update_scale on (sumsq, scale, clean) by itself: its multiplier and new state.
std::vector<float> UpdateScale(float sumsq, float scale, float clean, const AttrMap& attrs) {
  const DType f32 = DType::kFloat32;
  const NDArray x = testing::ArrayOf({sumsq}, Shape{1}, f32),
                s = testing::ArrayOf({scale}, Shape{1}, f32),
                c = testing::ArrayOf({clean}, Shape{1}, f32);
  const NDArray m = Invoke("amp_update_scale", {x, s, c}, attrs)[0];
  return {m.ToVector<float>()[0], s.ToVector<float>()[0], c.ToVector<float>()[0]};
}

// float32 only (its state is float32 on every device), so no declarative case: checked here.
TEST(AmpUpdateScale, GrowsBacksOffAndCapsAsItsRuleSays) {
  const AttrMap interval3 = {{"growth_interval", "3"}};
  EXPECT_EQ(UpdateScale(4, 8, 0, interval3), (std::vector<float>{0.125f, 8, 1}));
  EXPECT_EQ(UpdateScale(4, 8, 2, interval3), (std::vector<float>{0.125f, 16, 0}));
  EXPECT_EQ(UpdateScale(4, 1 << 24, 2, interval3),
            (std::vector<float>{1.0f / (1 << 24), 1 << 24, 0}));
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> r = UpdateScale(bad, 8, 2, interval3);
    EXPECT_TRUE(std::isnan(r[0])) << bad;
    EXPECT_EQ(r[1], 4);
    EXPECT_EQ(r[2], 0);
  }
  EXPECT_EQ(UpdateScale(4, 8, 0,
                        {{"growth_interval", "1"}, {"growth_factor", "4"}, {"max_scale", "100"}}),
            (std::vector<float>{0.125f, 32, 0}));
  testing::MarkCovered("amp_update_scale");
}

TEST(AmpUpdateScale, BadAttributesAndShapesAreClearErrors) {
  const std::vector<Shape> ones = {Shape{1}, Shape{1}, Shape{1}};
  testing::ExpectOpError("amp_update_scale", {{"backoff_factor", "1.5"}}, ones,
                         {"backoff_factor", "expected in (0, 1)", "1.5"});
  testing::ExpectOpError("amp_update_scale", {{"growth_interval", "0"}}, ones, {"growth_interval"});
  testing::ExpectOpError("amp_update_scale", {}, {Shape{2}, Shape{1}, Shape{1}},
                         {"'sumsq' (input 0) to have one element, found"});
}

// ---- multi_sum_sq (gradient clipping's norms) ----

// The sums of squares of arrays of the shapes given, in float64.
testing::OpCase SumSqCase(const std::vector<Shape>& shapes, const std::string& what) {
  testing::OpCase c{"multi_sum_sq",
                    {{"num_args", std::to_string(shapes.size())}},
                    shapes,
                    [](const testing::Inputs& in) {
                      testing::Values sums;
                      for (const testing::Values& x : in) {
                        double s = 0;
                        for (double v : x) s += v * v;
                        sums.push_back(s);
                      }
                      return testing::Outputs{sums};
                    }};
  c.check_gradient = false;
  c.name = "multi_sum_sq " + what;
  return c;
}

TEST(MultiSumSq, IsEachArraysSumOfSquares) {
  testing::RunOpCase(SumSqCase({Shape{3}}, "one array"));
  testing::RunOpCase(SumSqCase({Shape{2, 3}, Shape{5}, Shape{1}, Shape{4, 1, 2}}, "four shapes"));
}

// Arrays of several chunks (65,536 elements each) with ragged tails, and more arrays than one GPU
// launch takes (64): every array's sum still lands at its own position, in every float dtype.
TEST(MultiSumSq, ManyLargeArraysInEveryDtype) {
  std::vector<Shape> shapes;
  for (int i = 0; i < 70; ++i) shapes.push_back(Shape{i % 7 == 0 ? 140001 + i : 37 * i + 1});
  std::vector<DType> types = testing::TestFloatTypes();
  types.push_back(DType::kBFloat16);
  for (DType t : types) {
    std::vector<NDArray> in;
    std::vector<double> want;
    for (size_t i = 0; i < shapes.size(); ++i) {
      testing::Values v = testing::Uniform(shapes[i].Size(), 50 + static_cast<int>(i));
      if (t == DType::kBFloat16) v = testing::Bf16Exact(v);
      double s = 0;
      for (double x : v) s += x * x;
      want.push_back(s);
      in.push_back(testing::ArrayOf(v, shapes[i], t));
    }
    const NDArray out = Invoke("multi_sum_sq", in, {{"num_args", std::to_string(in.size())}})[0];
    EXPECT_EQ(out.dtype(), t);
    EXPECT_EQ(out.shape(), Shape{70});
    const testing::Values got = testing::ValuesOf(out);
    const double tol = t == DType::kBFloat16 ? 8e-3 : t == DType::kFloat64 ? 1e-12 : 1e-5;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], tol * (1 + want[i])) << DTypeName(t) << " array " << i;
  }
}

TEST(MultiSumSq, BadInputsSayWhatWasExpected) {
  testing::ExpectOpError("multi_sum_sq", {{"num_args", "2"}}, {Shape{3}},
                         {"multi_sum_sq", "expected 2 input(s), found 1"});
  const NDArray a = NDArray::FromVector(std::vector<float>{1, 2}, Shape{2}, testing::TestDevice());
  const NDArray b = testing::ArrayOf({1, 2}, Shape{2}, DType::kBFloat16);
  try {
    Invoke("multi_sum_sq", {a, b}, {{"num_args", "2"}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("expected every input to be float32"), std::string::npos) << m;
    EXPECT_NE(m.find("bfloat16 for input 1"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace weft
