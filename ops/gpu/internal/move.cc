#include "ops/gpu/internal/move.h"

#include <cuda_runtime.h>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"

namespace weft::gpu {
namespace {

// A write of at most two axes whose inner one is contiguous in both arrays, as cudaMemcpy2DAsync
// takes it (pitches kept well inside what every device accepts); false where it does not fit.
bool TryMemcpy2D(const OpContext& ctx, size_t element_size, const void* x, void* y,
                 const GpuAxes& walk, OpReq req) {
  if (req == OpReq::kAddTo || walk.ndim > 2) return false;
  const int inner = walk.ndim - 1;
  if (inner >= 0 && (walk.stride[0][inner] != 1 || walk.stride[1][inner] != 1)) return false;
  const size_t width = (inner >= 0 ? walk.dim[inner] : 1) * element_size;
  const size_t height = walk.ndim == 2 ? walk.dim[0] : 1;
  const size_t y_pitch = walk.ndim == 2 ? walk.stride[0][0] * element_size : width;
  const size_t x_pitch = walk.ndim == 2 ? walk.stride[1][0] * element_size : width;
  if (y_pitch >= (size_t{1} << 30) || x_pitch >= (size_t{1} << 30)) return false;
  StreamOf(ctx).Copy2D(y, y_pitch, x, x_pitch, width, height, cudaMemcpyDeviceToDevice);
  return true;
}

}  // namespace

void StridedMoveGpu(const OpContext& ctx, const std::string& t, size_t element_size, const void* x,
                    void* y, const GpuAxes& walk, int64_t n, OpReq req) {
  if (req == OpReq::kNull || n == 0) return;
  if (TryMemcpy2D(ctx, element_size, x, y, walk, req)) return;
  Launch(ctx, "move.cuh", Instance("weft::StridedCopy", {t}), n, x, y, walk, n, ReqCode(req));
}

}  // namespace weft::gpu
