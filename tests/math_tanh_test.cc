// weft's own float tanh on the host (ops/math/base.h: math::host::TanhFloat, which
// math::Tanh(float) is there): within 1.5 ulp of the exact value on a dense sweep of every float
// and around the switch between its two forms, exact at the edge cases (signed zeros, infinities,
// NaN, saturation), and the CPU's tanh and GELU ops, whose loops are vectorized, equal it called
// once per element, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
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

TEST(MathTanh, WithinOneAndAHalfUlpOfTheExactValueOnADenseSweep) {
  ExpectWithinUlpsOnADenseSweep(
      [](float x) { return math::host::TanhFloat(x); }, [](double x) { return std::tanh(x); },
      {0.625f, -0.625f},  // where the polynomial hands over to the exp form
      kMaxUlps);
}

TEST(MathTanh, EdgeCases) {
  EXPECT_EQ(std::bit_cast<uint32_t>(math::host::TanhFloat(0.0f)), std::bit_cast<uint32_t>(0.0f));
  EXPECT_EQ(std::bit_cast<uint32_t>(math::host::TanhFloat(-0.0f)), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(math::host::TanhFloat(kInf), 1.0f);
  EXPECT_EQ(math::host::TanhFloat(-kInf), -1.0f);
  EXPECT_EQ(math::host::TanhFloat(10.0f), 1.0f);
  EXPECT_EQ(math::host::TanhFloat(-100.0f), -1.0f);
  EXPECT_TRUE(std::isnan(math::host::TanhFloat(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(math::host::TanhFloat(1e-30f), 1e-30f);  // x + x^3 P: the cube underflows
  EXPECT_EQ(math::host::TanhFloat(std::numeric_limits<float>::denorm_min()),
            std::numeric_limits<float>::denorm_min());
}

// The ops' vectorized loops give what one call per element gives.
TEST(MathTanh, TheCpuOpsEqualTheScalarCall) {
  std::vector<float> x;
  for (int i = -4000; i < 4000; ++i) x.push_back(static_cast<float>(i) * 0.00317f);
  const NDArray a = NDArray::FromVector(x, Shape{static_cast<int64_t>(x.size())});
  const std::vector<float> tanh = Invoke("tanh", {a})[0].ToVector<float>();
  const std::vector<float> gelu =
      Invoke("Activation", {a}, {{"act_type", "gelu_tanh"}})[0].ToVector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(tanh[i]),
              std::bit_cast<uint32_t>(math::host::TanhFloat(x[i])))
        << x[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(gelu[i]),
              std::bit_cast<uint32_t>(fn::GeluTanh::Fwd(x[i], 0.0f)))
        << x[i];
  }
}

}  // namespace
}  // namespace weft
