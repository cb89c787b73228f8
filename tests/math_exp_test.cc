// weft's own float exp on the host (ops/math/base.h: math::host::ExpFloat, which math::Exp(float)
// is there): within 1 ulp of the exact value on a dense sweep of every float, exact at the edge
// cases (zeros, infinities, NaN, overflow and underflow), and the CPU's exp and sigmoid ops, whose
// loops are vectorized, equal it called once per element, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/math/base.h"
#include "ops/math/unary.h"
#include "storage/ndarray.h"
#include "tests/ulp.h"
#include "weft/imperative.h"

namespace weft {
namespace {

// The bound the header states, in ulps of the exact result.
constexpr double kMaxUlps = 1.0;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kFloatMax = std::numeric_limits<float>::max();

// Every float whose bit pattern is a multiple of `stride`, and every float within `radius` bit
// patterns of each edge: where exp overflows, where it leaves the normal range and where it
// underflows to 0.
std::vector<float> SweepValues(uint32_t stride, uint32_t radius) {
  std::vector<float> values;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += stride) {
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  for (float edge :
       {88.72283935546875f, -87.33654785156250f, -103.27892303466797f, -103.97207641601562f}) {
    const uint32_t bits = std::bit_cast<uint32_t>(edge);
    for (uint32_t b = bits - radius; b != bits + radius; ++b)
      values.push_back(std::bit_cast<float>(b));
  }
  return values;
}

TEST(MathExp, WithinOneUlpOfTheExactValueOnADenseSweep) {
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  for (float x : SweepValues(/*stride=*/257, /*radius=*/1 << 14)) {
    const float got = math::host::ExpFloat(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got)) << "exp(NaN) = " << got;
      continue;
    }
    const double error = UlpError(got, std::exp(static_cast<double>(x)));
    if (error > worst) worst = error, worst_x = x;
    ++checked;
  }
  EXPECT_LE(worst, kMaxUlps) << "at x = " << worst_x << " (" << std::hexfloat << worst_x
                             << "), over " << checked << " floats";
  std::printf("largest error %.4f ulp, at x = %.9g, over %lld floats\n", worst, worst_x,
              static_cast<long long>(checked));
}

TEST(MathExp, EdgeCases) {
  EXPECT_EQ(math::host::ExpFloat(0.0f), 1.0f);
  EXPECT_EQ(math::host::ExpFloat(-0.0f), 1.0f);
  EXPECT_EQ(math::host::ExpFloat(kInf), kInf);
  const float at_minus_inf = math::host::ExpFloat(-kInf);
  EXPECT_EQ(at_minus_inf, 0.0f);
  EXPECT_FALSE(std::signbit(at_minus_inf));
  EXPECT_TRUE(std::isnan(math::host::ExpFloat(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(math::host::ExpFloat(-std::numeric_limits<float>::quiet_NaN())));
  // The largest float whose exp is finite, and the next one up (exp(x) > FLT_MAX + ulp / 2).
  EXPECT_LT(math::host::ExpFloat(88.72283172607422f), kFloatMax * (1 + 1e-6));
  EXPECT_TRUE(std::isfinite(math::host::ExpFloat(88.72283172607422f)));
  for (float x : {88.72283935546875f, 89.0f, 100.0f, 1e30f, std::numeric_limits<float>::max()}) {
    EXPECT_EQ(math::host::ExpFloat(x), kInf) << x;
  }
  // Just above ln(2^-150), exp rounds up to the smallest subnormal; just below, to +0.
  EXPECT_EQ(math::host::ExpFloat(-103.97207641601562f), std::numeric_limits<float>::denorm_min());
  for (float x : {-103.97208404541016f, -104.0f, -1000.0f, -std::numeric_limits<float>::max()}) {
    const float y = math::host::ExpFloat(x);
    EXPECT_EQ(y, 0.0f) << x;
    EXPECT_FALSE(std::signbit(y)) << x;
  }
  EXPECT_EQ(math::Exp(1.5f), math::host::ExpFloat(1.5f));  // what the functors call on the host
}

// The same bits, or both NaN (a NaN's payload may depend on the order of a product's operands).
bool SameFloat(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// The ops run the functors in vectorized loops (AVX-512, AVX2 or the baseline, ops/cpu); every
// lane, and the scalar tail (the length is odd), computes what one call computes.
TEST(MathExp, CpuOpsEqualTheFunctionCalledPerElement) {
  std::vector<float> values = SweepValues(/*stride=*/4099, /*radius=*/1 << 10);
  values.push_back(1.0f);  // an odd length
  if (values.size() % 2 == 0) values.push_back(2.0f);
  const NDArray x = NDArray::FromVector(values, Shape{static_cast<int64_t>(values.size())});
  const std::vector<float> exp = Invoke("exp", {x})[0].ToVector<float>();
  const std::vector<float> sigmoid = Invoke("sigmoid", {x})[0].ToVector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    const float want_exp = math::Exp(values[i]), want_sigmoid = fn::Sigmoid::Fwd(values[i], 0.0f);
    ASSERT_TRUE(SameFloat(exp[i], want_exp))
        << "exp at x = " << std::hexfloat << values[i] << ": " << exp[i] << " vs " << want_exp;
    ASSERT_TRUE(SameFloat(sigmoid[i], want_sigmoid))
        << "sigmoid at x = " << std::hexfloat << values[i] << ": " << sigmoid[i] << " vs "
        << want_sigmoid;
  }
}

}  // namespace
}  // namespace weft
