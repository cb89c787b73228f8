#include "weft/onnx/tensor.h"

#include <limits>

#include "core/error.h"

namespace weft::onnx_import {
namespace {

template <typename T>
T At(const std::vector<char>& bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

int64_t HostTensor::Size() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == 0) return 0;
  }
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

std::vector<int64_t> HostTensor::Int64s() const {
  std::vector<int64_t> out(Size());
  for (int64_t i = 0; i < Size(); ++i) {
    switch (dtype) {
      case DType::kInt64:
        out[i] = At<int64_t>(bytes, i);
        break;
      case DType::kInt32:
        out[i] = At<int32_t>(bytes, i);
        break;
      case DType::kUInt8:
      case DType::kBool:
        out[i] = At<uint8_t>(bytes, i);
        break;
      default:
        WEFT_THROW("ONNX import: expected an integer tensor, found " << dtype);
    }
  }
  return out;
}

std::vector<double> HostTensor::Doubles() const {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    const std::vector<int64_t> ints = Int64s();  // throws for a dtype that is neither
    return std::vector<double>(ints.begin(), ints.end());
  }
  std::vector<double> out(Size());
  for (int64_t i = 0; i < Size(); ++i)
    out[i] = dtype == DType::kFloat32 ? At<float>(bytes, i) : At<double>(bytes, i);
  return out;
}

HostTensor HostTensor::OfInt64s(const std::vector<int64_t>& values, std::vector<int64_t> dims) {
  HostTensor t{DType::kInt64, std::move(dims), std::vector<char>(values.size() * 8)};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

HostTensor HostTensor::OfFloats(const std::vector<float>& values, std::vector<int64_t> dims) {
  HostTensor t{DType::kFloat32, std::move(dims), std::vector<char>(values.size() * 4)};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

}  // namespace weft::onnx_import
