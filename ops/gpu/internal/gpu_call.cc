#include "ops/gpu/internal/gpu_call.h"

#include <climits>
#include <cstdint>
#include <sstream>

namespace weft::gpu {

engine::GpuStream& StreamOf(const OpContext& ctx) {
  WEFT_CHECK(ctx.run.stream != nullptr)
      << "a GPU op on " << ctx.run.device << ": expected the stream of a GPU worker, found none";
  return *ctx.run.stream;
}

GpuCall::GpuCall(const OpContext& ctx)
    : ctx_(ctx), device_(ctx.run.device.id), stream_(StreamOf(ctx)), guard_(ctx.run.device.id) {}

std::vector<void*> GpuCall::Workspace(std::initializer_list<size_t> bytes) const {
  constexpr size_t kAlign = 256;
  size_t total = 0;
  for (size_t b : bytes) total += (b + kAlign - 1) / kAlign * kAlign;
  char* base = total == 0 ? nullptr : static_cast<char*>(ctx_.Workspace(total));
  std::vector<void*> parts;
  size_t offset = 0;
  for (size_t b : bytes) {
    parts.push_back(b == 0 ? nullptr : base + offset);
    offset += (b + kAlign - 1) / kAlign * kAlign;
  }
  return parts;
}

void CheckDType(const char* op, DType dtype, std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (d == dtype) return;
  }
  std::ostringstream expected;
  const char* separator = "";
  for (DType d : allowed) {
    expected << separator << d;
    separator = " or ";
  }
  WEFT_THROW(op << " on the GPU: expected " << expected.str() << ", found " << dtype);
}

cudnnDataType_t CudnnType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDNN_DATA_FLOAT;
    case DType::kFloat64:
      return CUDNN_DATA_DOUBLE;
    case DType::kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kFloat16:
      return CUDNN_DATA_HALF;
    default:
      WEFT_THROW("cuDNN: expected float32, float64, bfloat16 or float16, found " << dtype);
  }
}

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kFloat64:
      return CUDA_R_64F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    default:
      WEFT_THROW("cuBLAS: expected float32, float64, bfloat16 or float16, found " << dtype);
  }
}

int CheckedInt(const char* op, int64_t value) {
  if (value > INT_MAX)
    WEFT_THROW(op << " on the GPU: expected an extent of at most " << INT_MAX << ", found "
                  << value);
  return static_cast<int>(value);
}

}  // namespace weft::gpu
