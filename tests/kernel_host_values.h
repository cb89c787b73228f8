// Test values (float64, tests/op_test_util.h's Values) as host arrays of a kernel's types and
// back, for the tests that run ops/gpu/kernels on the host (tests/kernel_host_shim.h). Include it
// after the kernel headers: it uses their FromArith and ToArith.
#pragma once

#include <vector>

#include "tests/op_test_util.h"

namespace weft::testing {

// `v` in type T (float, double, bf16, f16), each value rounded once.
template <typename T>
std::vector<T> As(const Values& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FromArith<T>(static_cast<float>(v[i]));
  return out;
}
template <>
inline std::vector<double> As<double>(const Values& v) {
  return v;
}

template <typename T>
Values Back(const std::vector<T>& v) {
  Values out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(ToArith(v[i]));
  return out;
}

}  // namespace weft::testing
