#include "ops/internal/op_util.h"

#include "core/error.h"

namespace weft {

void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op) {
  if (in.size() != n) WEFT_THROW(op << ": expected " << n << " input(s), found " << in.size());
}

void CheckSameShape(const Shape& a, const Shape& b, const char* what) {
  if (a != b) WEFT_THROW(what << ": expected equal shapes, found " << a << " and " << b);
}

GradientFn GradientFromBackwardOp(const std::string& op, int input) {
  return [backward = "_backward_" + op, input](const Attrs& a, GradBuilder& g) {
    g.SetInputGrad(input, g.Op(backward, {g.OutGrad(0), g.Input(0)}, a.raw()));
  };
}

int NormalizeAxis(const std::string& op, int64_t axis, int ndim, const Shape& shape) {
  if (axis < -ndim || axis >= ndim) {
    WEFT_THROW(op << ": axis " << axis << " is out of range for input " << shape
                  << ": expected an axis in [" << -ndim << ", " << ndim - 1 << "]");
  }
  return static_cast<int>(axis < 0 ? axis + ndim : axis);
}

std::array<int64_t, Shape::kMaxDims> Strides(const Shape& shape) {
  std::array<int64_t, Shape::kMaxDims> strides{};
  int64_t stride = 1;
  for (int a = shape.ndim() - 1; a >= 0; --a) {
    strides[a] = stride;
    stride *= shape[a];
  }
  return strides;
}

}  // namespace weft
