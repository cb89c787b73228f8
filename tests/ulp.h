// Errors in float ulps, for the tests of the host's own float functions (math_exp_test.cc,
// math_tanh_test.cc).
#pragma once

#include <algorithm>
#include <cmath>

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

}  // namespace weft
