// weft's own float erf on the host (ops/math/base.h: math::host::ErfFloat, which math::Erf(float)
// is there): within 1.5 ulp of the exact value on a dense sweep of every float and around the
// switch between its two forms, exact at the edge cases (signed zeros, infinities, NaN,
// saturation), and the CPU's erf and GELU ops, whose loops are vectorized, equal it called once per
// element, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "ops/math/base.h"
#include "ops/math/unary.h"
#include "storage/ndarray.h"
#include "tests/ulp.h"
#include "weft/imperative.h"

namespace weft {
namespace {

constexpr double kMaxUlps = 1.5;  // the bound the header states
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(MathErf, WithinOneAndAHalfUlpOfTheExactValueOnADenseSweep) {
  ExpectWithinUlpsOnADenseSweep(
      [](float x) { return math::host::ErfFloat(x); }, [](double x) { return std::erf(x); },
      {0.921875f, -0.921875f, 4.0f},  // where the forms hand over, the clamp
      kMaxUlps);
}

TEST(MathErf, EdgeCases) {
  EXPECT_EQ(std::bit_cast<uint32_t>(math::host::ErfFloat(0.0f)), std::bit_cast<uint32_t>(0.0f));
  EXPECT_EQ(std::bit_cast<uint32_t>(math::host::ErfFloat(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(math::host::ErfFloat(kInf), 1.0f);
  EXPECT_EQ(math::host::ErfFloat(-kInf), -1.0f);
  EXPECT_EQ(math::host::ErfFloat(4.0f), 1.0f);
  EXPECT_EQ(math::host::ErfFloat(-1e30f), -1.0f);
  EXPECT_TRUE(std::isnan(math::host::ErfFloat(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(math::host::ErfFloat(-3.0f), -math::host::ErfFloat(3.0f));  // odd
  EXPECT_GT(math::host::ErfFloat(std::numeric_limits<float>::denorm_min()), 0.0f);
}

// The ops' vectorized loops give what one call per element gives.
TEST(MathErf, TheCpuOpsEqualTheScalarCall) {
  std::vector<float> x;
  for (int i = -4000; i < 4000; ++i) x.push_back(static_cast<float>(i) * 0.00317f);
  const NDArray a = NDArray::FromVector(x, Shape{static_cast<int64_t>(x.size())});
  const std::vector<float> erf = Invoke("erf", {a})[0].ToVector<float>();
  const std::vector<float> gelu = Invoke("gelu", {a})[0].ToVector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(erf[i]), std::bit_cast<uint32_t>(math::host::ErfFloat(x[i])))
        << x[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(gelu[i]), std::bit_cast<uint32_t>(fn::Gelu::Fwd(x[i], 0.0f)))
        << x[i];
  }
}

}  // namespace
}  // namespace weft
