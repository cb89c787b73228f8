// Errors in float ulps, for the tests of the host's own float functions (math_exp_test.cc,
// math_tanh_test.cc, math_erf_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <vector>

namespace weft {

// |got - exact| in units of the float ulp at `exact` (2^-149 among subnormals; 2^104 at and past
// 2^128, where +inf stands for 2^128). `exact` is the function in double: its own error, 2^-53
// relative, is far below a float ulp.
inline double UlpError(float got, double exact) {
  int exponent = 0;
  std::frexp(exact, &exponent);  // exact in [2^(exponent - 1), 2^exponent)
  const double ulp = std::ldexp(1.0, std::max(std::min(exponent, 128) - 24, -149));
  const double value = std::isinf(got) ? std::ldexp(1.0, 128) : static_cast<double>(got);
  if (std::isinf(got) && exact >= std::ldexp(1.0, 128)) return 0;  // overflowed, as it must
  return std::fabs(value - exact) / ulp;
}

// Checks f (float) within `max_ulps` of `exact` (double) on every 127th float and the 2^17 floats
// around each of `edges` (where a function's forms hand over); a NaN x must give NaN. Prints the
// largest error.
template <typename F, typename Exact>
void ExpectWithinUlpsOnADenseSweep(F f, Exact exact, std::initializer_list<float> edges,
                                   double max_ulps) {
  std::vector<float> values;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 127)
    values.push_back(std::bit_cast<float>(uint32_t(bits)));
  for (float edge : edges) {
    const uint32_t bits = std::bit_cast<uint32_t>(edge);
    for (uint32_t b = bits - (1 << 16); b != bits + (1 << 16); ++b)
      values.push_back(std::bit_cast<float>(b));
  }
  double worst = 0;
  float worst_x = 0;
  for (float x : values) {
    const float got = f(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(got)) << "f(NaN) = " << got;
      continue;
    }
    const double error = UlpError(got, exact(static_cast<double>(x)));
    if (error > worst) worst = error, worst_x = x;
  }
  EXPECT_LE(worst, max_ulps) << "at x = " << worst_x << " (" << std::hexfloat << worst_x << ")";
  std::printf("largest error %.4f ulp, at x = %.9g, over %zu floats\n", worst, worst_x,
              values.size());
}

}  // namespace weft
