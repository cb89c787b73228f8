// Training utilities: metrics against hand-computed values, initializers' bounds, scales and
// naming convention, and optimizers against a plain reference over several steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ExpectErrorContains;

NDArray Floats(const std::vector<float>& values, const Shape& shape) {
  return NDArray::FromVector(values, shape);
}

// ---- Metrics ------------------------------------------------------------------------------------

TEST(Metric, AccuracyTakesTheArgmaxOfScoresAndAccumulates) {
  Accuracy acc;
  EXPECT_EQ(acc.name(), "accuracy");
  EXPECT_TRUE(std::isnan(acc.Get()));
  // The rows' argmax: 0, 2, 2 against labels 0, 2, 1.
  acc.Update(Floats({0, 2, 1}, Shape{3}),
             Floats({0.9f, 0.05f, 0.05f, 0.1f, 0.2f, 0.7f, 0.3f, 0.3f, 0.4f}, Shape{3, 3}));
  EXPECT_DOUBLE_EQ(acc.Get(), 2.0 / 3);
  // A tie between classes 1 and 2: the first wins. Integer labels work too.
  acc.Update(NDArray::FromVector(std::vector<int32_t>{1}, Shape{1}),
             Floats({0.1f, 0.45f, 0.45f}, Shape{1, 3}));
  EXPECT_DOUBLE_EQ(acc.Get(), 3.0 / 4);
  EXPECT_EQ(acc.num_samples(), 4);
  acc.Reset();
  EXPECT_TRUE(std::isnan(acc.Get()));
  EXPECT_EQ(acc.num_samples(), 0);
}

TEST(Metric, AccuracyTakesPredictedClassesShapedLikeTheLabels) {
  Accuracy acc;
  acc.Update(Floats({0, 1, 2, 3, 4}, Shape{5}),
             NDArray::FromVector(std::vector<int64_t>{0, 1, 0, 3, 0}, Shape{5}));
  EXPECT_DOUBLE_EQ(acc.Get(), 3.0 / 5);
}

TEST(Metric, CrossEntropyIsTheMeanNegativeLogProbabilityOfTheLabel) {
  CrossEntropy ce;
  EXPECT_EQ(ce.name(), "cross-entropy");
  const std::vector<float> p = {0.7f, 0.2f, 0.1f, 0.25f, 0.25f, 0.5f, 1.0f, 0.0f, 0.0f};
  ce.Update(Floats({0, 2, 1}, Shape{3}), Floats(p, Shape{3, 3}));
  const double want =
      -(std::log(double{p[0]} + 1e-12) + std::log(double{p[5]} + 1e-12) + std::log(1e-12)) / 3;
  EXPECT_NEAR(ce.Get(), want, 1e-9);
  ce.Update(Floats({1}, Shape{1}), NDArray::FromVector(std::vector<double>{0.5, 0.5}, Shape{1, 2}));
  EXPECT_NEAR(ce.Get(), (3 * want + std::log(2.0)) / 4, 1e-9);
}

TEST(Metric, BadInputsSayWhatWasExpected) {
  Accuracy acc;
  CrossEntropy ce;
  ExpectErrorContains(
      [&] {
        acc.Update(Floats({0, 1}, Shape{2}), Floats({0, 1, 2}, Shape{3}));
      },
      {"accuracy", "expected predictions (2, C)", "(3,)"});
  ExpectErrorContains(
      [&] {
        acc.Update(Floats({0.5f}, Shape{1}), Floats({1, 0}, Shape{1, 2}));
      },
      {"accuracy", "label 0", "expected a class index", "found 0.5"});
  ExpectErrorContains(
      [&] {
        acc.Update(NDArray(), Floats({1, 0}, Shape{1, 2}));
      },
      {"labels array is null"});
  ExpectErrorContains(
      [&] {
        ce.Update(Floats({3}, Shape{1}), Floats({0.2f, 0.3f, 0.5f}, Shape{1, 3}));
      },
      {"cross-entropy", "class index in [0, 3)", "found 3"});
  ExpectErrorContains(
      [&] {
        ce.Update(Floats({0, 1}, Shape{2}), Floats({0.5f, 0.5f}, Shape{2}));
      },
      {"cross-entropy", "expected probabilities (2, C)", "(2,)"});
  EXPECT_EQ(acc.num_samples(), 0) << "a failed update adds nothing";
}

TEST(Metric, AccuracyRefusesLabelsOutsideTheClasses) {
  Accuracy acc;
  const NDArray scores = Floats({0.1f, 0.9f, 0.8f, 0.2f}, Shape{2, 2});  // 2 samples of 2 classes
  ExpectErrorContains(
      [&] {
        acc.Update(Floats({0, -1}, Shape{2}), scores);
      },
      {"accuracy", "label 1", "class index in [0, 2)", "found -1"});
  ExpectErrorContains(
      [&] {
        acc.Update(Floats({2, 0}, Shape{2}), scores);
      },
      {"accuracy", "label 0", "class index in [0, 2)", "found 2"});
  NDArray ten_classes(Shape{1, 10});
  ten_classes.Fill(0);
  ExpectErrorContains(
      [&] { acc.Update(NDArray::FromVector(std::vector<int32_t>{12}, Shape{1}), ten_classes); },
      {"accuracy", "class index in [0, 10)", "found 12"});
  // Predicted classes shaped like the labels: no class count, but a class is never negative.
  ExpectErrorContains([&] { acc.Update(Floats({-1}, Shape{1}), Floats({0}, Shape{1})); },
                      {"accuracy", "label 0", "non-negative class index", "found -1"});
  ExpectErrorContains([&] { acc.Update(Floats({0}, Shape{1}), Floats({-3}, Shape{1})); },
                      {"accuracy (predicted classes)", "found -3"});
  EXPECT_EQ(acc.num_samples(), 0) << "a failed update adds nothing";
}

// ---- Initializers -------------------------------------------------------------------------------

struct Moments {
  double mean, stddev, max_abs;
};

Moments MomentsOf(const std::vector<float>& v) {
  double sum = 0, sq = 0, max_abs = 0;
  for (float x : v) {
    sum += x;
    sq += double{x} * x;
    max_abs = std::max(max_abs, std::abs(double{x}));
  }
  const double n = static_cast<double>(v.size()), mean = sum / n;
  return {mean, std::sqrt(sq / n - mean * mean), max_abs};
}

TEST(Initializer, XavierScaleFollowsMXNetsFans) {
  const Shape conv{64, 32, 3, 3};  // fan_in = 32 * 9, fan_out = 64 * 9
  using X = Xavier;
  EXPECT_DOUBLE_EQ(X().Scale(conv), std::sqrt(3.0 / ((288 + 576) / 2.0)));
  EXPECT_DOUBLE_EQ(X(X::RandType::kUniform, X::FactorType::kIn, 2).Scale(conv),
                   std::sqrt(2.0 / 288));
  EXPECT_DOUBLE_EQ(X(X::RandType::kUniform, X::FactorType::kOut, 1).Scale(conv),
                   std::sqrt(1.0 / 576));
  EXPECT_DOUBLE_EQ(X().Scale(Shape{10, 40}), std::sqrt(3.0 / 25));
  ExpectErrorContains([] { Xavier().Scale(Shape{5}); }, {"Xavier", "at least 2 axes", "(5,)"});
}

TEST(Initializer, XavierUniformStaysWithinItsScale) {
  SeedRandom(1);
  Xavier xavier;
  NDArray w(Shape{64, 32, 3, 3});
  xavier.Initialize("conv1_weight", w);
  const double scale = xavier.Scale(w.shape());
  const Moments m = MomentsOf(w.ToVector<float>());
  EXPECT_LE(m.max_abs, scale);
  EXPECT_GT(m.max_abs, 0.99 * scale) << "18,432 draws reach the bounds";
  EXPECT_NEAR(m.stddev, scale / std::sqrt(3.0), 0.02 * scale);  // uniform's standard deviation
  EXPECT_NEAR(m.mean, 0, 0.02 * scale);
}

TEST(Initializer, XavierGaussianHasItsScaleAsStandardDeviation) {
  SeedRandom(2);
  Xavier xavier(Xavier::RandType::kGaussian, Xavier::FactorType::kIn, 2);
  NDArray w(Shape{256, 100}, Device::Cpu(), DType::kFloat64);
  xavier.InitWeight("fc_weight", w);
  const std::vector<double> v = w.ToVector<double>();
  const Moments m = MomentsOf(std::vector<float>(v.begin(), v.end()));
  EXPECT_NEAR(m.stddev, std::sqrt(2.0 / 100), 0.02 * std::sqrt(2.0 / 100));
  EXPECT_NEAR(m.mean, 0, 0.02 * std::sqrt(2.0 / 100));
}

TEST(Initializer, UniformAndNormalHaveTheirSpread) {
  SeedRandom(3);
  NDArray u(Shape{10000}), n(Shape{10000});
  Uniform(0.5).InitWeight("u", u);
  Normal(0.25).InitWeight("n", n);
  const Moments mu = MomentsOf(u.ToVector<float>()), mn = MomentsOf(n.ToVector<float>());
  EXPECT_LE(mu.max_abs, 0.5);
  EXPECT_GT(mu.max_abs, 0.49);
  EXPECT_NEAR(mn.stddev, 0.25, 0.01);
  EXPECT_NEAR(mn.mean, 0, 0.01);
}

TEST(Initializer, NamesChooseTheFillBiasesGetZeros) {
  Uniform init(1.0);
  NDArray bias(Shape{8}), gamma(Shape{8}), beta(Shape{8}), mean(Shape{8}), var(Shape{8}),
      weight(Shape{4, 8});
  for (const NDArray& a : {bias, gamma, beta, mean, var, weight}) a.Fill(5);
  init.Initialize("fc1_bias", bias);
  init.Initialize("bn_gamma", gamma);
  init.Initialize("bn_beta", beta);
  init.Initialize("bn_moving_mean", mean);
  init.Initialize("bn_moving_var", var);
  init.Initialize("fc1_weight", weight);
  EXPECT_EQ(bias.ToVector<float>(), std::vector<float>(8, 0));
  EXPECT_EQ(beta.ToVector<float>(), std::vector<float>(8, 0));
  EXPECT_EQ(mean.ToVector<float>(), std::vector<float>(8, 0));
  EXPECT_EQ(gamma.ToVector<float>(), std::vector<float>(8, 1));
  EXPECT_EQ(var.ToVector<float>(), std::vector<float>(8, 1));
  const Moments m = MomentsOf(weight.ToVector<float>());
  EXPECT_LE(m.max_abs, 1.0);
  EXPECT_GT(m.stddev, 0.1) << "the weight got the initializer's draws";
  ExpectErrorContains([&] { init.Initialize("fc1_data", weight); },
                      {"Initialize", "'fc1_data'", "_weight, _bias"});
  ExpectErrorContains([&] { init.Initialize("fc1bias", bias); }, {"'fc1bias'"});
}

TEST(Initializer, SameSeedSameValues) {
  Xavier xavier(Xavier::RandType::kGaussian);
  NDArray a(Shape{16, 8}), b(Shape{16, 8}), c(Shape{16, 8});
  SeedRandom(42);
  xavier.Initialize("w_weight", a);
  SeedRandom(42);
  xavier.Initialize("w_weight", b);
  SeedRandom(43);
  xavier.Initialize("w_weight", c);
  EXPECT_EQ(a.ToVector<float>(), b.ToVector<float>());
  EXPECT_NE(a.ToVector<float>(), c.ToVector<float>());
}

TEST(Initializer, ConstantAndZeroFillAnyDType) {
  NDArray i(Shape{3}, Device::Cpu(), DType::kInt32);
  Constant(7).Initialize("table_weight", i);
  EXPECT_EQ(i.ToVector<int32_t>(), (std::vector<int32_t>{7, 7, 7}));
  Zero().Initialize("weight", i);
  EXPECT_EQ(i.ToVector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
}

TEST(Initializer, BadSettingsAndArraysSayWhatWasExpected) {
  ExpectErrorContains([] { Uniform(0); }, {"Uniform", "scale > 0"});
  ExpectErrorContains([] { Normal(-1); }, {"Normal", "sigma >= 0"});
  ExpectErrorContains([] { Xavier(Xavier::RandType::kUniform, Xavier::FactorType::kAvg, 0); },
                      {"magnitude > 0"});
  ExpectErrorContains([] { Xavier().Initialize("fc_weight", NDArray(Shape{5})); },
                      {"Xavier", "'fc_weight'", "at least 2 axes", "(5,)"});
  ExpectErrorContains(
      [] { Uniform().Initialize("e_weight", NDArray(Shape{2}, Device::Cpu(), DType::kInt32)); },
      {"Uniform", "'e_weight'", "expected float32 or float64, found int32"});
}

// ---- Optimizers ---------------------------------------------------------------------------------

std::vector<double> Gradient(int step, size_t size) {
  std::vector<double> g(size);
  for (size_t i = 0; i < size; ++i)
    g[i] = std::sin(1.7 * static_cast<double>(i) + step) * (1 + step);
  return g;
}

NDArray ToArray(const std::vector<double>& v, const Shape& shape) {
  return NDArray::FromVector(std::vector<float>(v.begin(), v.end()), shape);
}

// g = clip(rescale * grad) + wd * w, the common preprocessing of every optimizer.
double Preprocess(double grad, double w, double wd, double rescale, double clip) {
  double g = rescale * grad;
  if (clip > 0) g = std::clamp(g, -clip, clip);
  return g + wd * w;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(Optimizer, SgdMatchesThePlainRule) {
  SGD sgd(/*lr=*/0.1, /*momentum=*/0, /*wd=*/0.01, /*rescale_grad=*/0.5, /*clip_gradient=*/0.8);
  std::vector<double> w = {1, -2, 3, -4, 5, -6};
  NDArray weight = ToArray(w, Shape{2, 3});
  for (int step = 0; step < 4; ++step) {
    const std::vector<double> g = Gradient(step, w.size());
    sgd.Update(0, weight, ToArray(g, Shape{2, 3}));
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.1 * Preprocess(g[i], w[i], 0.01, 0.5, 0.8);
  }
  ExpectNear(weight.ToVector<float>(), w);
}

TEST(Optimizer, SgdMomentumKeepsOneStatePerIndex) {
  SGD sgd(/*lr=*/0.05, /*momentum=*/0.9, /*wd=*/0.001);
  std::vector<std::vector<double>> w = {{0.5, -0.5, 1}, {2, -1, 0.25, 4}},
                                   mom = {{0, 0, 0}, {0, 0, 0, 0}};
  const std::vector<Shape> shapes = {Shape{3}, Shape{2, 2}};
  std::vector<NDArray> weights = {ToArray(w[0], shapes[0]), ToArray(w[1], shapes[1])};
  for (int step = 0; step < 5; ++step) {
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && step % 2 == 1) continue;  // index 1 is updated less often: its state is its own
      const std::vector<double> g = Gradient(step + p, w[p].size());
      sgd.Update(p, weights[p], ToArray(g, shapes[p]));
      for (size_t i = 0; i < w[p].size(); ++i) {
        mom[p][i] = 0.9 * mom[p][i] - 0.05 * Preprocess(g[i], w[p][i], 0.001, 1, -1);
        w[p][i] += mom[p][i];
      }
    }
  }
  ExpectNear(weights[0].ToVector<float>(), w[0]);
  ExpectNear(weights[1].ToVector<float>(), w[1]);
}

// The reference is MXNet's Adam: bias correction folded into the step's learning rate, with t
// counted per index.
TEST(Optimizer, AdamMatchesTheReferenceWithPerIndexBiasCorrection) {
  const double lr = 0.01, b1 = 0.8, b2 = 0.99, eps = 1e-6, wd = 0.002, clip = 2.5;
  Adam adam(lr, b1, b2, eps, wd, /*rescale_grad=*/1, clip);
  std::vector<std::vector<double>> w = {{0.5, -0.5, 1, -1, 2, -2}, {3, -3}};
  std::vector<std::vector<double>> m = {std::vector<double>(6), std::vector<double>(2)}, v = m;
  std::vector<NDArray> weights = {ToArray(w[0], Shape{3, 2}), ToArray(w[1], Shape{2})};
  int t[2] = {0, 0};
  for (int step = 0; step < 6; ++step) {
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && step < 3) continue;  // index 1 starts later: its t starts at 1 too
      const std::vector<double> g = Gradient(step, w[p].size());
      adam.Update(p, weights[p], ToArray(g, weights[p].shape()));
      ++t[p];
      const double lr_t = lr * std::sqrt(1 - std::pow(b2, t[p])) / (1 - std::pow(b1, t[p]));
      for (size_t i = 0; i < w[p].size(); ++i) {
        const double gi = Preprocess(g[i], w[p][i], wd, 1, clip);
        m[p][i] = b1 * m[p][i] + (1 - b1) * gi;
        v[p][i] = b2 * v[p][i] + (1 - b2) * gi * gi;
        w[p][i] -= lr_t * m[p][i] / (std::sqrt(v[p][i]) + eps);
      }
    }
  }
  ExpectNear(weights[0].ToVector<float>(), w[0]);
  ExpectNear(weights[1].ToVector<float>(), w[1]);
}

// With bias correction, Adam's first step moves every weight by about lr (sign of the gradient),
// whatever the gradient's size: without it the step would be lr * (1 - b1) / sqrt(1 - b2).
TEST(Optimizer, AdamsFirstStepIsAboutTheLearningRate) {
  Adam adam(/*lr=*/0.1);
  NDArray weight = Floats({0, 0, 0}, Shape{3});
  adam.Update(7, weight, Floats({1e-2f, -5, 300}, Shape{3}));
  ExpectNear(weight.ToVector<float>(), {-0.1, 0.1, -0.1});
}

TEST(Optimizer, LearningRateCanBeChangedBetweenSteps) {
  SGD sgd(0.1);
  NDArray weight = Floats({1}, Shape{1});
  sgd.Update(0, weight, Floats({1}, Shape{1}));
  sgd.set_learning_rate(0.01);
  EXPECT_EQ(sgd.learning_rate(), 0.01);
  sgd.Update(0, weight, Floats({1}, Shape{1}));
  ExpectNear(weight.ToVector<float>(), {1 - 0.1 - 0.01});
}

TEST(Optimizer, BadSettingsAndArgumentsSayWhatWasExpected) {
  ExpectErrorContains([] { SGD(-0.1); }, {"SGD", "learning rate >= 0", "-0.1"});
  ExpectErrorContains([] { SGD(0.1, -0.5); }, {"SGD", "momentum >= 0"});
  ExpectErrorContains([] { Adam(0.1, 1.0); }, {"Adam", "beta1 and beta2 in [0, 1)"});
  ExpectErrorContains([] { Adam(0.1, 0.9, 0.999, 0); }, {"Adam", "epsilon > 0"});
  SGD sgd(0.1, 0.9);
  ExpectErrorContains([&] { sgd.Update(0, NDArray(Shape{3}), NDArray(Shape{4})); },
                      {"SGD", "gradient like its weight", "(3,)", "(4,)"});
  sgd.Update(0, NDArray(Shape{3}), NDArray(Shape{3}));
  ExpectErrorContains([&] { sgd.Update(0, NDArray(Shape{2}), NDArray(Shape{2})); },
                      {"SGD", "index 0 was first updated with a weight of (3,) float32, now (2,)"});
  ExpectErrorContains([&] { sgd.set_learning_rate(-1); }, {"learning rate >= 0"});
}

}  // namespace
}  // namespace weft
