// The optimizers against PyTorch's: AdamW (weft/optimizer.h) for ten steps with a warm-up and a
// decay filter against torch.optim.AdamW with two parameter groups (tests/adamw_torch_cases.py).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/adamw_torch_cases.h"
#include "weft/optimizer.h"

namespace weft {
namespace {

namespace fx = testing::adamw_torch;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got[k], want[k], 2e-6 * (1 + std::abs(want[k]))) << what << ", element " << k;
}

// PyTorch adds epsilon to the bias-corrected sqrt(var), weft to the uncorrected one (the
// correction is in the rate): a difference far below float32's resolution here.
TEST(AdamW, TenStepsWithAWarmUpAndADecayFilterFollowPyTorch) {
  AdamW adamw(fx::kLr, fx::kBeta1, fx::kBeta2, fx::kEpsilon, fx::kWd);
  adamw.set_decay_filter(DecayMatricesOnly);
  const NDArray w = NDArray::FromVector(fx::kW0, Shape{4, 3});
  const NDArray b = NDArray::FromVector(fx::kB0, Shape{4});
  for (int t = 1; t <= fx::kSteps; ++t) {
    adamw.set_learning_rate(fx::kLr * std::min(1.0, t / 5.0));
    adamw.Update(0, w, NDArray::FromVector(fx::kGradW[t - 1], Shape{4, 3}));
    adamw.Update(1, b, NDArray::FromVector(fx::kGradB[t - 1], Shape{4}));
    ExpectNear(w.ToVector<float>(), fx::kWAfter[t - 1], "weight after step " + std::to_string(t));
    ExpectNear(b.ToVector<float>(), fx::kBAfter[t - 1], "bias after step " + std::to_string(t));
  }
}

// Without the filter the bias decays too, and so leaves PyTorch's no-decay group's values.
TEST(AdamW, WithoutTheFilterTheBiasDecays) {
  AdamW adamw(fx::kLr, fx::kBeta1, fx::kBeta2, fx::kEpsilon, fx::kWd);
  const NDArray b = NDArray::FromVector(fx::kB0, Shape{4});
  adamw.set_learning_rate(fx::kLr / 5);
  adamw.Update(1, b, NDArray::FromVector(fx::kGradB[0], Shape{4}));
  const std::vector<float> got = b.ToVector<float>();
  for (size_t k = 0; k < got.size(); ++k) {
    const double decay = fx::kB0[k] * (fx::kLr / 5) * fx::kWd;
    EXPECT_NEAR(got[k], fx::kBAfter[0][k] - decay, 1e-6) << "element " << k;
  }
}

TEST(AdamW, DecayMatricesOnlyDecaysTwoOrMoreDimensions) {
  EXPECT_TRUE(DecayMatricesOnly("fc.weight", Shape{4, 3}));
  EXPECT_TRUE(DecayMatricesOnly("conv.weight", Shape{8, 3, 3, 3}));
  EXPECT_FALSE(DecayMatricesOnly("fc.bias", Shape{4}));
  EXPECT_FALSE(DecayMatricesOnly("ln.gamma", Shape{768}));
}

}  // namespace
}  // namespace weft
