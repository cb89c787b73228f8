#include "storage/ndarray.h"

#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/bfloat16.h"
#include "core/error.h"
#include "storage/internal/chunk.h"
#include "storage/random.h"

namespace weft {

using engine::Engine;
using engine::RunContext;

NDArray::NDArray(const Shape& shape, Device device, DType dtype)
    : chunk_(std::make_shared<internal::Chunk>(static_cast<size_t>(shape.Size()) * DTypeSize(dtype),
                                               device)),
      shape_(shape),
      dtype_(dtype) {}

void NDArray::NullArray(const char* what) {
  WEFT_THROW(what << ": the array is null (default-constructed)");
}

Device NDArray::device() const { return chunk_ ? chunk_->device() : Device::Cpu(); }

engine::VarHandle NDArray::var() const {
  CheckNotNone("var");
  return chunk_->var();
}

bool NDArray::BytesOverlap(const NDArray& other) const {
  if (bytes() == 0 || other.bytes() == 0) return false;
  return offset_ < other.offset_ + other.bytes() && other.offset_ < offset_ + bytes();
}

TensorView NDArray::View() const {
  CheckNotNone("View");
  return TensorView(static_cast<char*>(chunk_->data()) + offset_, shape_, dtype_, chunk_->device());
}

void NDArray::WaitToRead() const {
  CheckNotNone("WaitToRead");
  Engine::Get()->WaitForVar(chunk_->var());
}

void NDArray::WaitToWrite() const {
  CheckNotNone("WaitToWrite");
  // A no-op write waits for every earlier read and write; waiting for it waits for them.
  Engine::Get()->PushSync([](RunContext) {}, device(), {}, {chunk_->var()},
                          engine::FnProperty::kNormal, 0, "WaitToWrite");
  Engine::Get()->WaitForVar(chunk_->var());
}

// On a GPU the values are made on the host by the copy worker, then copied in (pageable memory
// is staged by the driver before cudaMemcpyAsync returns, so the host buffer may go at once).
void NDArray::PushWrite(const char* name, std::function<void(const TensorView&)> fn) const {
  CheckNotNone(name);
  TensorView view = View();  // allocates now, on the pushing thread
  auto chunk = chunk_;       // keeps the memory alive until the op has run
  if (device().is_cpu()) {
    Engine::Get()->PushSync([view, chunk, fn = std::move(fn)](RunContext) { fn(view); }, device(),
                            {}, {chunk_->var()}, engine::FnProperty::kNormal, 0, name);
    return;
  }
  Engine::Get()->PushSync(
      [view, chunk, fn = std::move(fn)](RunContext run) {
        std::vector<std::max_align_t> host((view.bytes() + sizeof(std::max_align_t) - 1) /
                                           sizeof(std::max_align_t));
        fn(TensorView(host.data(), view.shape(), view.dtype(), Device::Cpu()));
        Storage::Get(view.device())->Copy(view.raw(), host.data(), view.bytes(), run.stream);
      },
      device(), {}, {chunk_->var()}, engine::FnProperty::kCopyToGpu, 0, name);
}

void NDArray::SyncCopyFromHost(const void* data, size_t bytes) const {
  WEFT_CHECK_EQ(bytes, this->bytes()) << "SyncCopyFromHost into " << ToString();
  // An empty array has no buffer: memcpy's pointers must not be null, even for no bytes.
  PushWrite("SyncCopyFromHost", [data, bytes](const TensorView& v) {
    if (bytes != 0) std::memcpy(v.raw(), data, bytes);
  });
  WaitToRead();
}

void NDArray::SyncCopyToHost(void* data, size_t bytes) const {
  CheckNotNone("SyncCopyToHost");
  WEFT_CHECK_EQ(bytes, this->bytes()) << "SyncCopyToHost from " << ToString();
  if (device().is_cpu()) {
    WaitToRead();
    if (bytes != 0) std::memcpy(data, View().raw(), bytes);
    return;
  }
  // A copy op that writes a var of its own; waiting for that var waits for the copy's event.
  Engine* engine = Engine::Get();
  engine::VarHandle done = engine->NewVariable();
  TensorView src = View();
  auto chunk = chunk_;
  engine->PushSync(
      [src, chunk, data](RunContext run) {
        Storage::Get(src.device())->Copy(data, src.raw(), src.bytes(), run.stream);
      },
      device(), {chunk_->var()}, {done}, engine::FnProperty::kCopyFromGpu, 0, "SyncCopyToHost");
  std::exception_ptr error;
  try {
    engine->WaitForVar(done);
  } catch (...) {
    error = std::current_exception();
  }
  engine->DeleteVariable([](RunContext) {}, Device::Cpu(), done);
  if (error) std::rethrow_exception(error);
}

void NDArray::CopyTo(const NDArray& dst) const {
  CheckNotNone("CopyTo");
  dst.CheckNotNone("CopyTo");
  WEFT_CHECK(shape_ == dst.shape_)
      << "CopyTo: copying " << ToString() << " into " << dst.ToString();
  WEFT_CHECK(dtype_ == dst.dtype_)
      << "CopyTo: copying " << ToString() << " into " << dst.ToString();
  TensorView src = View(), out = dst.View();
  auto keep = std::make_pair(chunk_, dst.chunk_);
  // Host-to-device and device-to-host copies go to the GPU's copy workers; a copy between GPU
  // arrays runs on the destination's compute workers.
  const Device from = device(), to = dst.device();
  const Device runs_on = to.is_gpu() ? to : from;
  const engine::FnProperty prop = from.is_cpu() == to.is_cpu() ? engine::FnProperty::kNormal
                                  : from.is_cpu()              ? engine::FnProperty::kCopyToGpu
                                                               : engine::FnProperty::kCopyFromGpu;
  Engine::Get()->PushSync(
      [src, out, keep, runs_on](RunContext run) {
        Storage::Get(runs_on)->Copy(out.raw(), src.raw(), src.bytes(), run.stream);
      },
      runs_on, {chunk_->var()}, {dst.chunk_->var()}, prop, 0, "Copy");
}

NDArray NDArray::Copy(Device device) const {
  CheckNotNone("Copy");
  NDArray out(shape_, device, dtype_);
  CopyTo(out);
  return out;
}

NDArray NDArray::Reshape(const Shape& shape) const {
  CheckNotNone("Reshape");
  WEFT_CHECK_EQ(shape.Size(), size()) << "Reshape: cannot view " << shape_ << " as " << shape;
  NDArray view = *this;
  view.shape_ = shape;
  return view;
}

NDArray NDArray::Slice(int64_t begin, int64_t end) const {
  CheckNotNone("Slice");
  WEFT_CHECK_GE(shape_.ndim(), 1) << "Slice: a scalar has no rows";
  if (begin < 0 || end > shape_[0] || begin > end) {
    WEFT_THROW("Slice: expected 0 <= begin <= end <= "
               << shape_[0] << " for " << ToString() << ", found [" << begin << ", " << end << ")");
  }
  NDArray view = *this;
  view.shape_[0] = end - begin;
  view.offset_ +=
      static_cast<size_t>(begin * (size() / std::max<int64_t>(shape_[0], 1))) * DTypeSize(dtype_);
  return view;
}

NDArray NDArray::Alias(const Shape& shape, DType dtype) const {
  CheckNotNone("Alias");
  const size_t need = static_cast<size_t>(shape.Size()) * DTypeSize(dtype);
  WEFT_CHECK_LE(need, bytes()) << "Alias: " << shape << " " << dtype << " does not fit in "
                               << ToString();
  NDArray view = *this;
  view.shape_ = shape;
  view.dtype_ = dtype;
  return view;
}

void NDArray::Fill(double value) const {
  if (value == 0 && !std::signbit(value) &&
      device().is_gpu()) {  // +0.0: all zero bits in every dtype
    TensorView view = View();
    auto chunk = chunk_;
    Engine::Get()->PushSync(
        [view, chunk](RunContext run) {
          Storage::Get(view.device())->Zero(view.raw(), view.bytes(), run.stream);
        },
        device(), {}, {chunk_->var()}, engine::FnProperty::kNormal, 0, "Fill");
    return;
  }
  PushWrite("Fill", [value](const TensorView& v) {
    if (v.dtype() == DType::kBFloat16) {  // the value rounded once, to nearest even
      std::fill_n(static_cast<uint16_t*>(v.raw()), v.size(),
                  BFloat16::FromFloat(static_cast<float>(value)).bits);
      return;
    }
    WEFT_DTYPE_SWITCH(v.dtype(), T, "Fill",
                      { std::fill_n(v.data<T>(), v.size(), static_cast<T>(value)); });
  });
}

NDArray NDArray::Arange(int64_t n, double start, double step, Device device, DType dtype) {
  WEFT_CHECK_GE(n, 0) << "Arange: a negative length";
  NDArray a(Shape{n}, device, dtype);
  a.PushWrite("Arange", [start, step](const TensorView& v) {
    WEFT_DTYPE_SWITCH(v.dtype(), T, "Arange", {
      T* p = v.data<T>();
      for (int64_t i = 0; i < v.size(); ++i)
        p[i] = static_cast<T>(start + step * static_cast<double>(i));
    });
  });
  return a;
}

void NDArray::FillUniform(double low, double high) const {
  WEFT_CHECK_LT(low, high) << "FillUniform: expected low < high";
  RandomKey key = ReserveRandom(device(), static_cast<uint64_t>(size()) * 2);
  PushWrite("FillUniform", [key, low, high](const TensorView& v) {
    PhiloxStream stream(key);
    WEFT_FLOAT_SWITCH(v.dtype(), T, "FillUniform", {
      T* p = v.data<T>();
      for (int64_t i = 0; i < v.size(); ++i)
        p[i] = static_cast<T>(low + (high - low) * stream.UniformDouble());
    });
  });
}

void NDArray::FillNormal(double mean, double stddev) const {
  WEFT_CHECK_GE(stddev, 0.0) << "FillNormal: expected stddev >= 0";
  RandomKey key = ReserveRandom(device(), static_cast<uint64_t>(size()) * 2);
  PushWrite("FillNormal", [key, mean, stddev](const TensorView& v) {
    PhiloxStream stream(key);
    WEFT_FLOAT_SWITCH(v.dtype(), T, "FillNormal", {
      T* p = v.data<T>();
      for (int64_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(mean + stddev * stream.Normal());
    });
  });
}

std::string NDArray::ToString() const {
  if (is_none()) return "NDArray (null)";
  std::ostringstream os;
  os << "NDArray " << shape_ << " " << dtype_ << " " << device();
  return os.str();
}

}  // namespace weft
