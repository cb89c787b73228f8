// TensorView: a non-owning view of a dense, row-major tensor: pointer, shape, dtype, device.
// What operators compute on; NDArray (storage/) owns the memory behind it.
//
//   TensorView v(ptr, Shape{2, 3}, DType::kFloat32, Device::Cpu());
//   float* p = v.data<float>();        // checks the dtype
//   int64_t n = v.size();
#pragma once

#include <cstdint>

#include "core/bfloat16.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace weft {

// The C++ type of each dtype, for dispatch. bf16/fp16 have no arithmetic type on the CPU yet.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, Shape shape, DType dtype, Device device)
      : data_(data), shape_(shape), dtype_(dtype), device_(device) {}

  void* raw() const { return data_; }
  template <typename T>
  T* data() const {
    WEFT_CHECK(DTypeOf<T>::value == dtype_)
        << "tensor holds " << dtype_ << ", read as " << DTypeOf<T>::value;
    return static_cast<T*>(data_);
  }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size() const { return shape_.Size(); }
  size_t bytes() const { return static_cast<size_t>(size()) * DTypeSize(dtype_); }
  // The same memory seen with another shape of the same size.
  TensorView Reshaped(const Shape& shape) const;

 private:
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  Device device_;
};

inline TensorView TensorView::Reshaped(const Shape& shape) const {
  WEFT_CHECK_EQ(shape.Size(), size()) << "cannot view " << shape_ << " as " << shape;
  return TensorView(data_, shape, dtype_, device_);
}

}  // namespace weft

// Runs `...` with `T` bound to the C++ type of `dtype` (float32, float64, int32, int64, uint8);
// another dtype is a weft::Error naming `what`.
//
//   WEFT_DTYPE_SWITCH(x.dtype(), T, "add", { Add(x.data<T>(), ...); });
#define WEFT_DTYPE_SWITCH(dtype, T, what, ...)                               \
  switch (dtype) {                                                           \
    case ::weft::DType::kFloat32: {                                          \
      using T = float;                                                       \
      __VA_ARGS__;                                                           \
      break;                                                                 \
    }                                                                        \
    case ::weft::DType::kFloat64: {                                          \
      using T = double;                                                      \
      __VA_ARGS__;                                                           \
      break;                                                                 \
    }                                                                        \
    case ::weft::DType::kInt32: {                                            \
      using T = int32_t;                                                     \
      __VA_ARGS__;                                                           \
      break;                                                                 \
    }                                                                        \
    case ::weft::DType::kInt64: {                                            \
      using T = int64_t;                                                     \
      __VA_ARGS__;                                                           \
      break;                                                                 \
    }                                                                        \
    case ::weft::DType::kUInt8: {                                            \
      using T = uint8_t;                                                     \
      __VA_ARGS__;                                                           \
      break;                                                                 \
    }                                                                        \
    default:                                                                 \
      WEFT_THROW(what << ": dtype " << (dtype) << " is not supported here"); \
  }

// The same for the floating-point dtypes weft computes in on the CPU (float32, float64).
#define WEFT_FLOAT_SWITCH(dtype, T, what, ...)                                \
  switch (dtype) {                                                            \
    case ::weft::DType::kFloat32: {                                           \
      using T = float;                                                        \
      __VA_ARGS__;                                                            \
      break;                                                                  \
    }                                                                         \
    case ::weft::DType::kFloat64: {                                           \
      using T = double;                                                       \
      __VA_ARGS__;                                                            \
      break;                                                                  \
    }                                                                         \
    default:                                                                  \
      WEFT_THROW(what << ": expected float32 or float64, found " << (dtype)); \
  }
