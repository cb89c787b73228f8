// What every GPU operator in ops/gpu works with: one call's device, stream, library handles and
// workspace; the dtypes an op accepts; and the alpha/beta scalars that implement output requests.
//
//   void FooGpu(const OpContext& ctx, ..., std::span<const OpReq> req, ...) {
//     if (req[0] == OpReq::kNull) return;
//     CheckDType("Foo", x.dtype(), {DType::kFloat32, DType::kFloat64});
//     const GpuCall call(ctx);
//     const std::vector<void*> ws = call.Workspace({bytes_a, bytes_b});
//     WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
//       return cudnnFoo(h, One(x.dtype()).get(), ..., BetaFor(req[0], x.dtype()).get(), ...);
//     }));
//   }
//
// Requests: kWrite and kWriteInplace overwrite (beta 0), kAddTo accumulates (beta 1); the caller
// skips kNull. Work is only ever queued on the call's stream, through the stream object
// (engine/gpu/gpu_stream.h), which launches batched kernels before anything else; nothing here
// synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/gpu/cuda_check.h"
#include "engine/gpu/gpu_stream.h"
#include "ops/gpu/library_handles.h"
#include "ops/op.h"

namespace weft::gpu {

// The stream of the GPU op running with `ctx`. Throws weft::Error when there is none (the op is
// not running on a GPU worker).
engine::GpuStream& StreamOf(const OpContext& ctx);

// One GPU op call: makes its device current for the call's scope.
class GpuCall {
 public:
  explicit GpuCall(const OpContext& ctx);
  const OpContext& ctx() const { return ctx_; }
  int device() const { return device_; }
  engine::GpuStream& stream() const { return stream_; }
  // fn(handle) with a handle bound to the call's stream, after the kernels batched on it so far;
  // returns what fn returns (library_handles.h). The handle lives for fn's scope only.
  template <typename F>
  decltype(auto) Cudnn(F&& fn) const {
    return WithCudnn(stream_, std::forward<F>(fn));
  }
  template <typename F>
  decltype(auto) Cublas(F&& fn) const {
    return WithCublas(stream_, std::forward<F>(fn));
  }
  // The call's workspace as parts of these sizes, each 256-byte aligned, from one request
  // (ctx.Workspace keeps only its latest buffer valid). A part of 0 bytes is null.
  std::vector<void*> Workspace(std::initializer_list<size_t> bytes) const;

 private:
  const OpContext& ctx_;
  int device_;
  engine::GpuStream& stream_;
  DeviceGuard guard_;
};

// Throws "<op>: expected float32 or float64, found bfloat16" unless `dtype` is one of `allowed`.
void CheckDType(const char* op, DType dtype, std::initializer_list<DType> allowed);

cudnnDataType_t CudnnType(DType dtype);  // float32, float64, bfloat16, float16
cudaDataType_t CudaType(DType dtype);    // float32, float64, bfloat16, float16

// An alpha or beta for cuDNN and cuBLAS, in the type they read for data of `dtype`: double for
// float64, float otherwise (bfloat16 and float16 compute in float32).
class Scalar {
 public:
  Scalar(DType dtype, double value)
      : as_double_(dtype == DType::kFloat64), f_(static_cast<float>(value)), d_(value) {}
  const void* get() const {
    return as_double_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_);
  }

 private:
  bool as_double_;
  float f_;
  double d_;
};

inline Scalar One(DType dtype) { return Scalar(dtype, 1.0); }
// 1 for kAddTo (accumulate into the output), 0 otherwise (overwrite).
inline Scalar BetaFor(OpReq req, DType dtype) {
  return Scalar(dtype, req == OpReq::kAddTo ? 1.0 : 0.0);
}

// Throws unless `value` fits the int the libraries take for extents and strides.
int CheckedInt(const char* op, int64_t value);

}  // namespace weft::gpu
