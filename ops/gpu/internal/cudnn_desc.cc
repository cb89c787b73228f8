#include "ops/gpu/internal/cudnn_desc.h"

#include "core/env.h"
#include "core/error.h"
#include "ops/gpu/internal/gpu_call.h"

namespace weft::gpu {

bool AllowTf32() { return GetEnvBool("WEFT_GPU_TF32", false); }

namespace {

cudnnTensorFormat_t FormatOf(bool channels_last) {
  return channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

}  // namespace

TensorDesc ImageDesc(const char* op, DType dtype, const Shape& shape, bool channels_last) {
  WEFT_CHECK_EQ(shape.ndim(), 4) << op << ": 4-D image";
  CheckedInt(op, shape.Size());  // cuDNN's strides are ints too
  TensorDesc desc;
  WEFT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), FormatOf(channels_last), CudnnType(dtype),
                                              CheckedInt(op, shape[0]), CheckedInt(op, shape[1]),
                                              CheckedInt(op, shape[2]), CheckedInt(op, shape[3])));
  return desc;
}

FilterDesc FilterOf(const char* op, DType dtype, const Shape& shape, bool channels_last) {
  WEFT_CHECK_EQ(shape.ndim(), 4) << op << ": filter";
  CheckedInt(op, shape.Size());
  FilterDesc desc;
  WEFT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc.get(), CudnnType(dtype), FormatOf(channels_last),
                                              CheckedInt(op, shape[0]), CheckedInt(op, shape[1]),
                                              CheckedInt(op, shape[2]), CheckedInt(op, shape[3])));
  return desc;
}

void CheckNotBlocked(const char* op, bool blocked) {
  if (blocked) {
    WEFT_THROW(op << ": layout NCHW16c (oneDNN's blocked layout) runs on the CPU only; on the GPU "
                  << "the data must be NCHW (layout NCHW, the default) or NHWC");
  }
}

ConvolutionDesc ConvolutionOf(DType dtype, const Window2d& win, int64_t groups) {
  const char* op = "Convolution";
  ConvolutionDesc desc;
  const cudnnDataType_t compute = Is16BitFloat(dtype) ? CUDNN_DATA_FLOAT : CudnnType(dtype);
  WEFT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      desc.get(), CheckedInt(op, win.pad[0]), CheckedInt(op, win.pad[1]),
      CheckedInt(op, win.stride[0]), CheckedInt(op, win.stride[1]), CheckedInt(op, win.dilate[0]),
      CheckedInt(op, win.dilate[1]), CUDNN_CROSS_CORRELATION, compute));
  WEFT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc.get(), CheckedInt(op, groups)));
  if (dtype == DType::kFloat32)
    WEFT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc.get(), CUDNN_FMA_MATH));
  if (Is16BitFloat(dtype))
    WEFT_CUDNN_CHECK(cudnnSetConvolutionMathType(desc.get(), CUDNN_TENSOR_OP_MATH));
  return desc;
}

PoolingDesc PoolingOf(const Window2d& win, PoolType type, bool count_include_pad) {
  PoolingDesc desc;
  const cudnnPoolingMode_t mode = type == PoolType::kMax ? CUDNN_POOLING_MAX
                                  : count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                      : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  WEFT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
      desc.get(), mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(win.kernel[0]),
      static_cast<int>(win.kernel[1]), static_cast<int>(win.pad[0]), static_cast<int>(win.pad[1]),
      static_cast<int>(win.stride[0]), static_cast<int>(win.stride[1])));
  return desc;
}

}  // namespace weft::gpu
