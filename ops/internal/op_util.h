// What op definitions share, on no particular device: shape checks for inference, axis
// normalization, and the common gradient rule that calls a
// backward op. (Device computes have their own helpers: ops/cpu/internal/, ops/gpu/internal/.)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "ops/op.h"

namespace weft {

void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op);
void CheckSameShape(const Shape& a, const Shape& b, const char* what);

// Normalizes an axis of an op's attribute: `axis` + `ndim` when negative. Throws a weft::Error
// naming `op` and `shape` unless -ndim <= axis < ndim. (expand_dims passes ndim + 1.)
int NormalizeAxis(const std::string& op, int64_t axis, int ndim, const Shape& shape);

// Row-major strides of `shape`, in elements.
std::array<int64_t, Shape::kMaxDims> Strides(const Shape& shape);

// The gradient rule of an op `op` whose backward op `_backward_<op>` takes (the gradient of
// output 0, forward input 0) and the forward attributes, and gives the gradient of forward input
// `input` (the other inputs get none).
GradientFn GradientFromBackwardOp(const std::string& op, int input = 0);

}  // namespace weft
