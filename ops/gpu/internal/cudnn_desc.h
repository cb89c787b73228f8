// Owners of cuDNN descriptors and the builders that fill them for weft's dense row-major
// tensors: each made by one small function, so no op spells a descriptor out twice.
//
//   const TensorDesc x = ImageDesc("Pooling", DType::kFloat32, Shape{n, c, h, w});
//   WEFT_CUDNN_CHECK(cudnnPoolingForward(handle, pool.get(), ..., x.get(), ...));
#pragma once

#include <cudnn.h>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/gpu/library_handles.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"

namespace weft::gpu {

// Move-only owner of one cuDNN descriptor.
template <typename T, cudnnStatus_t (*kCreate)(T*), cudnnStatus_t (*kDestroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { WEFT_CUDNN_CHECK(kCreate(&desc_)); }
  ~CudnnDescriptor() {
    if (desc_ != nullptr) kDestroy(desc_);
  }
  CudnnDescriptor(CudnnDescriptor&& other) noexcept : desc_(other.desc_) { other.desc_ = nullptr; }
  CudnnDescriptor& operator=(CudnnDescriptor&&) = delete;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return desc_; }

 private:
  T desc_ = nullptr;
};

using TensorDesc = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                   cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                   cudnnDestroyFilterDescriptor>;
using ConvolutionDesc =
    CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                    cudnnDestroyConvolutionDescriptor>;
using PoolingDesc = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                    cudnnDestroyPoolingDescriptor>;

// A packed 4-D image of extents `nchw` = (N, C, H, W), lying as NCHW or, channels_last, as NHWC
// (PyTorch's channels_last); throws, naming `op`, where an extent exceeds int.
TensorDesc ImageDesc(const char* op, DType dtype, const Shape& nchw, bool channels_last = false);
// A packed filter of extents `kcrs` = (K, C, R, S) (weft's (F, C / G, kh, kw)), lying as KCRS or,
// channels_last, as KRSC (what cuDNN's channels-last kernels read).
FilterDesc FilterOf(const char* op, DType dtype, const Shape& kcrs, bool channels_last = false);
// Throws, naming `op`, for layout NCHW16c (`blocked`), which only the CPU runs.
void CheckNotBlocked(const char* op, bool blocked);

// A cross-correlation with `win`'s stride, symmetric padding and dilation, in `groups` groups,
// computing in `dtype` (float for bfloat16, on tensor cores). float32 is restricted to FMA kernels
// (no TF32 tensor-core rounding), so results match the CPU's float32 within its tolerances.
ConvolutionDesc ConvolutionOf(DType dtype, const Window2d& win, int64_t groups);
// Whether float32 work may round through TF32 tensor cores: WEFT_GPU_TF32=1 (default 0: strict
// float32, matching the CPU), as PyTorch's torch.backends.cudnn.allow_tf32. Read at each call.
// Only the RNN reads it for now; convolution and FullyConnected stay strict.
bool AllowTf32();
// Max pooling (padding never wins), or average pooling that counts padding as zeros
// (count_include_pad) or leaves it out; symmetric padding only (cuDNN has no other).
PoolingDesc PoolingOf(const Window2d& win, PoolType type, bool count_include_pad);

}  // namespace weft::gpu
