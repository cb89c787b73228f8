// NDArray: an asynchronous n-dimensional array. It owns (shares) a chunk of device memory and
// the engine variable that orders every access to it. Every operation on an NDArray is pushed
// to the engine and returns at once; the results are as if each ran in program order. Memory is
// allocated lazily, when the first op that touches the array is pushed.
//
//   NDArray a(Shape{2, 3});             // float32 on the CPU, not yet allocated
//   a.Fill(1.5f);                       // pushed; returns at once
//   NDArray row = a.Slice(1, 2);        // a view: shares memory (and ordering) with `a`
//   std::vector<float> v = a.ToVector<float>();   // waits for the writes before it
//
// Copies of an NDArray are handles to the same memory (like shared_ptr); Copy() makes a new one.
// An error thrown by an op that writes the array comes out of WaitToRead/ToVector.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "engine/engine.h"

namespace weft {

namespace internal {
class Chunk;
}

class NDArray {
 public:
  NDArray() = default;  // a null array (is_none())
  explicit NDArray(const Shape& shape, Device device = Device::Cpu(),
                   DType dtype = DType::kFloat32);

  template <typename T>
  static NDArray FromVector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::Cpu());

  bool is_none() const { return chunk_ == nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t size() const { return shape_.Size(); }
  size_t bytes() const { return static_cast<size_t>(size()) * DTypeSize(dtype_); }
  // The engine variable every op on this array (and on its views) reads or writes.
  engine::VarHandle var() const;
  // True when the two arrays' bytes overlap.
  bool Overlaps(const NDArray& other) const {
    return SharesMemoryWith(other) && BytesOverlap(other);
  }
  // True when both are the same memory seen the same way (same start and size).
  bool SameMemoryAs(const NDArray& other) const {
    return SharesMemoryWith(other) && offset_ == other.offset_ && bytes() == other.bytes();
  }
  // True when both share memory (one is a view of the other, or both of a third).
  bool SharesMemoryWith(const NDArray& other) const {
    return chunk_ != nullptr && chunk_ == other.chunk_;
  }

  // The memory as a tensor view, allocated on first use. Read or write it only inside an engine
  // op that declared this array's var (or after WaitToRead/WaitToWrite).
  TensorView View() const;

  void WaitToRead() const;   // until every pushed write is done; rethrows its error
  void WaitToWrite() const;  // until every pushed read and write is done

  // Host copies. The Sync forms wait; CopyFrom takes its data by value and returns at once.
  void SyncCopyFromHost(const void* data, size_t bytes) const;
  void SyncCopyToHost(void* data, size_t bytes) const;
  template <typename T>
  void CopyFrom(std::vector<T> values) const;
  template <typename T>
  std::vector<T> ToVector() const;

  NDArray Copy(Device device) const;      // a new array with the same contents
  void CopyTo(const NDArray& dst) const;  // same shape and dtype; devices may differ

  // Views that share memory and ordering with this array.
  NDArray Reshape(const Shape& shape) const;        // same number of elements
  NDArray Slice(int64_t begin, int64_t end) const;  // rows [begin, end) of the first axis
  // The first bytes of this array's memory seen with another shape and dtype (for a memory plan
  // that lets entries of different types share one buffer). Needs shape's bytes <= bytes().
  NDArray Alias(const Shape& shape, DType dtype) const;

  // Initialization, pushed like any op.
  void Fill(double value) const;
  static NDArray Arange(int64_t n, double start = 0, double step = 1, Device device = Device::Cpu(),
                        DType dtype = DType::kFloat32);
  void FillUniform(double low, double high) const;  // reproducible: see storage/random.h
  void FillNormal(double mean, double stddev) const;

  std::string ToString() const;  // "NDArray (2, 3) float32 cpu"

 private:
  void CheckNotNone(const char* what) const {
    if (chunk_ == nullptr) [[unlikely]]
      NullArray(what);
  }
  [[noreturn]] static void NullArray(const char* what);
  bool BytesOverlap(const NDArray& other) const;  // of two arrays sharing a chunk
  void PushWrite(const char* name, std::function<void(const TensorView&)> fn) const;

  std::shared_ptr<internal::Chunk> chunk_;
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  size_t offset_ = 0;  // bytes from the start of the chunk (views)
};

template <typename T>
NDArray NDArray::FromVector(const std::vector<T>& values, const Shape& shape, Device device) {
  NDArray a(shape, device, DTypeOf<T>::value);
  a.CopyFrom(values);
  return a;
}

template <typename T>
void NDArray::CopyFrom(std::vector<T> values) const {
  CheckNotNone("CopyFrom");
  WEFT_CHECK(DTypeOf<T>::value == dtype_)
      << "CopyFrom: array is " << dtype_ << ", values are " << DTypeOf<T>::value;
  WEFT_CHECK_EQ(static_cast<int64_t>(values.size()), size())
      << "CopyFrom: values for " << shape_.ToString();
  PushWrite("CopyFromHost", [values = std::move(values)](const TensorView& v) {
    std::copy(values.begin(), values.end(), v.data<T>());
  });
}

template <typename T>
std::vector<T> NDArray::ToVector() const {
  CheckNotNone("ToVector");
  WEFT_CHECK(DTypeOf<T>::value == dtype_)
      << "ToVector: array is " << dtype_ << ", asked for " << DTypeOf<T>::value;
  std::vector<T> out(static_cast<size_t>(size()));
  SyncCopyToHost(out.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace weft
