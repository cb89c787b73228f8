// Dynamic loss scaling (TrainerOptions::loss_scaling; the amp_update_scale op): with the scale a
// power of two, scaled training equals unscaled training bit for bit, with clipping on and off and
// in bfloat16-mixed; an overflow in one gradient skips exactly that step (weights, optimizer state
// and copies keep their bits) and halves the scale, clean steps double it at the growth interval
// and never past the cap, and a saved and loaded trainer resumes exactly, the scaler included.
// Bad settings are clear errors (the op alone: ops_optimizer_test). On the GPU
// (gpu_loss_scaling_test) the same, with the step captured as CUDA graphs after its warm-up.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ArrayOf;
using testing::ExpectErrorContains;
using testing::Values;
using testing::ValuesOf;

constexpr int64_t kBatch = 8;

// Two dense layers on two data inputs, summed into a classifier: a huge value in "side" overflows
// the scaled gradient of side_fc's weight alone.
Symbol TwoInputs() {
  const Symbol a =
      Symbol::Op("FullyConnected",
                 {Symbol::Op("relu", {Symbol::Op("FullyConnected", {Symbol::Variable("data")},
                                                 {{"num_hidden", "16"}}, "fc1")})},
                 {{"num_hidden", "4"}}, "fc2");
  const Symbol b =
      Symbol::Op("FullyConnected", {Symbol::Variable("side")}, {{"num_hidden", "4"}}, "side_fc");
  return Symbol::Op("SoftmaxCrossEntropy", {Symbol::Op("add", {a, b}), Symbol::Variable("label")},
                    {}, "loss");
}

const std::map<std::string, Shape> kShapes = {
    {"data", Shape{kBatch, 6}}, {"side", Shape{kBatch, 3}}, {"label", Shape{kBatch}}};

// Batch k (it depends on k only); `overflow`: one side value that overflows the scaled gradient.
std::map<std::string, NDArray> Batch(int k, bool overflow = false) {
  std::vector<float> x(kBatch * 6), side(kBatch * 3), y(kBatch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i + 13 * k));
  for (size_t i = 0; i < side.size(); ++i)
    side[i] = 0.5f * std::cos(1.3f * static_cast<float>(i + 7 * k));
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>((i + k) % 4);
  if (overflow) side[0] = -1e35f;  // sample 0's argmax, class 0, is not its label, 3
  return {{"data", NDArray::FromVector(x, Shape{kBatch, 6})},
          {"side", NDArray::FromVector(side, Shape{kBatch, 3})},
          {"label", NDArray::FromVector(y, Shape{kBatch})}};
}

TrainerOptions Options(std::optional<LossScaling> scaling, double clip = 0,
                       Precision precision = Precision::kFloat32) {
  TrainerOptions options;
  options.device = testing::TestDevice();
  options.loss_scaling = scaling;
  options.clip_global_norm = clip;
  options.precision = precision;
  return options;
}

// Weights, optimizer state and 16-bit copies, by name.
std::map<std::string, Values> Everything(const Trainer& t) {
  std::map<std::string, Values> values;
  for (const std::string& p : t.parameter_names()) values[p] = ValuesOf(t.parameter(p));
  for (const std::string& s : t.state_names()) values[s] = ValuesOf(t.state(s));
  for (const std::string& c : t.copy_names()) values[c] = ValuesOf(t.copy(c));
  return values;
}

const SGD kSgd(0.05, /*momentum=*/0.9, /*wd=*/1e-4, /*rescale_grad=*/1.0 / kBatch);

Trainer Make(const TrainerOptions& options) {
  SeedRandom(5);
  return Trainer(TwoInputs(), kShapes, Xavier(), kSgd, options);
}

// ---- Scaled training is unscaled training ---------------------------------------------------

void ExpectScaledEqualsUnscaled(double clip, Precision precision) {
  Trainer plain = Make(Options(std::nullopt, clip, precision));
  Trainer scaled =
      Make(Options(LossScaling{.initial_scale = 1024, .growth_interval = 3}, clip, precision));
  for (int k = 0; k < 10; ++k) {
    plain.Step(Batch(k));
    scaled.Step(Batch(k));
    ASSERT_EQ(Everything(scaled), Everything(plain)) << "step " << k;
    EXPECT_EQ(scaled.outputs()[0].ToVector<float>(), plain.outputs()[0].ToVector<float>());
  }
  EXPECT_EQ(scaled.loss_scale(), 8192) << "1024, doubled after steps 3, 6 and 9";
  // the gradients are the rescaled loss's (rescale_grad 1 / 8), scaled: step 10 ran with 8192
  EXPECT_EQ(plain.loss_scale(), 1);
  const std::vector<float> g = scaled.gradient("fc1_weight").ToVector<float>(),
                           h = plain.gradient("fc1_weight").ToVector<float>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], h[i] * 8192 / kBatch) << i;
}

TEST(LossScaling, ScaledTrainingEqualsUnscaledBitForBit) {
  ExpectScaledEqualsUnscaled(/*clip=*/0, Precision::kFloat32);
}

TEST(LossScaling, ScaledTrainingEqualsUnscaledWithClipping) {
  ExpectScaledEqualsUnscaled(/*clip=*/0.05, Precision::kFloat32);
}

TEST(LossScaling, ScaledTrainingEqualsUnscaledInBFloat16Mixed) {
  ExpectScaledEqualsUnscaled(/*clip=*/0.05, Precision::kBFloat16Mixed);
}

TEST(LossScaling, TheScaleGrowsToItsCapAndNoFurther) {
  Trainer t = Make(Options(LossScaling{.initial_scale = 1 << 22, .growth_interval = 1}));
  std::vector<double> scales;
  for (int k = 0; k < 4; ++k) {
    t.Step(Batch(k));
    scales.push_back(t.loss_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{1 << 23, 1 << 24, 1 << 24, 1 << 24}));
}

// ---- An overflow skips its step ----------------------------------------------------------------

void ExpectOverflowSkipsTheStep(double clip, Precision precision) {
  const LossScaling scaling{.initial_scale = 65536, .growth_interval = 2};
  Trainer t = Make(Options(scaling, clip, precision));
  Trainer reference = Make(Options(scaling, clip, precision));  // never sees the bad batch
  std::vector<double> scales;
  for (int k = 0; k < 3; ++k) {
    t.Step(Batch(k));
    reference.Step(Batch(k));
    scales.push_back(t.loss_scale());
  }
  const auto before = Everything(t);
  t.Step(Batch(3, /*overflow=*/true));
  scales.push_back(t.loss_scale());
  // one gradient overflowed: side_fc's weight; the others are finite
  const std::vector<float> bad = t.gradient("side_fc_weight").ToVector<float>();
  EXPECT_TRUE(std::any_of(bad.begin(), bad.end(), [](float v) { return std::isinf(v); }));
  for (const char* p : {"fc1_weight", "fc2_weight", "side_fc_bias"}) {
    for (float v : t.gradient(p).ToVector<float>()) ASSERT_TRUE(std::isfinite(v)) << p;
  }
  EXPECT_EQ(Everything(t), before) << "the skipped step wrote nothing";
  for (int k = 4; k < 8; ++k) {
    t.Step(Batch(k));
    reference.Step(Batch(k));
    scales.push_back(t.loss_scale());
  }
  EXPECT_EQ(Everything(t), Everything(reference)) << "as if the bad batch never came";
  // clean, clean: doubled; clean; overflow: halved, count restarted; clean x4: doubled twice
  EXPECT_EQ(scales,
            (std::vector<double>{65536, 131072, 131072, 65536, 65536, 131072, 131072, 262144}));
  EXPECT_EQ(t.steps(), 8) << "a skipped step is still a step";
  if (testing::TestDevice().is_gpu()) {
    EXPECT_GT(t.stats().cuda_graphs, 0) << "the overflow and the steps after it were replays";
  }
}

TEST(LossScaling, AnOverflowInOneGradientSkipsExactlyThatStep) {
  ExpectOverflowSkipsTheStep(/*clip=*/0, Precision::kFloat32);
}

TEST(LossScaling, AnOverflowSkipsTheStepWithClippingAndCopies) {
  ExpectOverflowSkipsTheStep(/*clip=*/0.05, Precision::kBFloat16Mixed);
}

// ---- Save and load ---------------------------------------------------------------------------

TEST(LossScaling, ResumeAfterSaveAndLoadIsExact) {
  const TrainerOptions options = Options(LossScaling{.initial_scale = 256, .growth_interval = 3});
  Trainer straight = Make(options);
  for (int k = 0; k < 10; ++k) straight.Step(Batch(k, /*overflow=*/k == 2));
  const std::string path = ::testing::TempDir() + "/loss_scaling_resume.safetensors";
  {
    Trainer first = Make(options);
    for (int k = 0; k < 5; ++k) first.Step(Batch(k, /*overflow=*/k == 2));
    first.Save(path);
  }
  Trainer resumed = Make(Options(LossScaling{.initial_scale = 2, .growth_interval = 3}));
  resumed.Load(path);
  EXPECT_EQ(resumed.loss_scale(), 128) << "halved once at step 3, not grown yet";
  for (int k = 5; k < 10; ++k) resumed.Step(Batch(k));
  EXPECT_EQ(Everything(resumed), Everything(straight));
  EXPECT_EQ(resumed.loss_scale(), straight.loss_scale())
      << "the count of clean steps came back too (it grows at step 6)";
  EXPECT_EQ(straight.loss_scale(), 512);

  Trainer unscaled = Make(Options(std::nullopt));
  ExpectErrorContains([&] { unscaled.Load(path); }, {"trainer.loss_scale"});
  std::remove(path.c_str());
}

// ---- Bad settings ----------------------------------------------------------------------------

TEST(LossScaling, BadSettingsAreClearErrors) {
  ExpectErrorContains([] { Make(Options(LossScaling{.initial_scale = 1e9})); },
                      {"loss scaling", "initial_scale <= max_scale", "1e+09"});
  ExpectErrorContains([] { Make(Options(LossScaling{.backoff_factor = 2})); },
                      {"loss scaling", "backoff_factor"});
}

}  // namespace
}  // namespace weft
