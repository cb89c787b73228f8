// A tensor known while a model is imported (weft/onnx.h): an initializer, a Constant node's value,
// or the result of folding shape arithmetic on those. Row-major bytes on the host, in one of the
// dtypes weft has; what the graph reads at run time becomes a parameter NDArray.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace weft::onnx_import {

struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<char> bytes;  // row-major, Size() * DTypeSize(dtype)

  int64_t Size() const;  // the product of dims; int64's largest where that overflows
  Shape ShapeOf() const { return Shape(dims); }
  // The values as int64 (integer dtypes) or double (any dtype weft computes in): what shape
  // arithmetic and attributes-from-inputs read.
  std::vector<int64_t> Int64s() const;
  std::vector<double> Doubles() const;
  static HostTensor OfInt64s(const std::vector<int64_t>& values, std::vector<int64_t> dims);
  static HostTensor OfFloats(const std::vector<float>& values, std::vector<int64_t> dims);
};

}  // namespace weft::onnx_import
