// The elementwise binary ops, listed once: each row is an op's name, its functor in
// ops/math/binary.h (namespace weft::fn) and its description. The op definitions (binary.cc) and
// each device's compute (ops/cpu/binary.cc, ops/gpu/binary.cc) expand this list, so an op added
// here exists everywhere at once. And add_n's parameters.
#pragma once

// X(name, functor, description)
#define WEFT_BINARY_OPS(X)         \
  X(add, Add, "lhs + rhs")         \
  X(sub, Sub, "lhs - rhs")         \
  X(mul, Mul, "lhs * rhs")         \
  X(div, Div, "lhs / rhs")         \
  X(maximum, Max, "max(lhs, rhs)") \
  X(minimum, Min, "min(lhs, rhs)")

namespace weft {

// The attribute of add_n: how many arrays it sums (at least 1).
struct AddNParam {
  int num_args;
};

}  // namespace weft
