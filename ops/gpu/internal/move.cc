#include "ops/gpu/internal/move.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "ops/gpu/internal/axes.h"
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

// A write whose innermost axis runs contiguously in both arrays (a transpose that keeps the last
// axis, as the heads' moves of attention do: (T, B*H, D) to (B*H, T, D)), copied in 16-byte packs:
// the walk's offsets counted in packs, one index computation a pack instead of an element.
// False where the run, a stride or a pointer is not whole packs.
bool TryStridedPacks(const OpContext& ctx, const std::string& t, size_t element_size, const void* x,
                     void* y, const GpuAxes& walk, int64_t n, OpReq req) {
  const int inner = walk.ndim - 1;
  const int64_t v = 16 / static_cast<int64_t>(element_size);
  if (req == OpReq::kAddTo || inner < 0 || v < 2 || walk.stride[0][inner] != 1 ||
      walk.stride[1][inner] != 1 || walk.dim[inner] % v != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return false;
  GpuAxes packs = walk;
  for (int d = 0; d < walk.ndim; ++d) {
    for (int a : {0, 1}) {
      if (d != inner && walk.stride[a][d] % v != 0) return false;
      packs.stride[a][d] = d == inner ? 1 : walk.stride[a][d] / v;
    }
  }
  packs.dim[inner] = walk.dim[inner] / v;
  const int64_t count = n / v;
  Launch(ctx, "move.cuh", Instance("weft::StridedCopyPacks", {t, std::to_string(v)}), count, x, y,
         packs, count);
  return true;
}

// The tiled kernel for a walk (array 0: y, 1: x) whose last axis is not x's innermost one, when
// both sides of a tile are at least 4 (below that a tile is mostly idle). The batch is every axis
// but those two.
bool TryTransposeTiles(const OpContext& ctx, const std::string& t, const GpuAxes& walk,
                       const void* xp, void* yp, int64_t n_out, OpReq req) {
  const int last = walk.ndim - 1;
  int rows_axis = -1;
  for (int d = 0; d < last; ++d) rows_axis = walk.stride[1][d] == 1 ? d : rows_axis;
  if (last < 1 || rows_axis < 0 || walk.stride[1][last] == 1) return false;
  const int64_t rows = walk.dim[rows_axis], cols = walk.dim[last];
  if (rows < 4 || cols < 4) return false;
  std::vector<WalkAxis> batch;
  for (int d = 0; d < last; ++d) {
    if (d != rows_axis) batch.push_back({walk.dim[d], {walk.stride[0][d], walk.stride[1][d], 0}});
  }
  const int64_t n_batch = n_out / (rows * cols),
                tiles = n_batch * ((rows + 31) / 32) * ((cols + 31) / 32);
  GpuAxes batch_walk = MergeAxes(batch);
  int64_t n = n_batch, r = rows, c = cols, y_row_stride = walk.stride[0][rows_axis],
          x_col_stride = walk.stride[1][last];
  int req_code = ReqCode(req);
  void* args[] = {&xp, &yp, &batch_walk, &n, &r, &c, &y_row_stride, &x_col_stride, &req_code};
  LaunchArgs(ctx, "move.cuh", Instance("weft::TransposeTiles", {t}), tiles, /*block_per_item=*/true,
             args);
  return true;
}

}  // namespace

void StridedMoveGpu(const OpContext& ctx, const std::string& t, size_t element_size, const void* x,
                    void* y, const GpuAxes& walk, int64_t n, OpReq req) {
  if (req == OpReq::kNull || n == 0) return;
  if (TryMemcpy2D(ctx, element_size, x, y, walk, req)) return;
  if (TryStridedPacks(ctx, t, element_size, x, y, walk, n, req)) return;
  Launch(ctx, "move.cuh", Instance("weft::StridedCopy", {t}), n, x, y, walk, n, ReqCode(req));
}

void StridedViewGpu(const OpContext& ctx, const char* op, const TensorView& x,
                    std::span<const int64_t> walk, std::span<const int64_t> stride, int64_t offset,
                    OpReq req, const TensorView& y) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kFillTypes, {&x, 1}, {&y, 1});
  std::vector<WalkAxis> axes(walk.size());
  int64_t step = 1;  // y's stride along the walk's axis k: y is the walk in row-major order
  for (size_t k = walk.size(); k-- > 0;) {
    axes[k] = {walk[k], {step, stride[k], 0}};
    step *= walk[k];
  }
  const GpuAxes merged = MergeAxes(axes);
  const void* from = static_cast<const char*>(x.raw()) + offset * DTypeSize(x.dtype());
  if (merged.ndim > 1 && TryTransposeTiles(ctx, t, merged, from, y.raw(), y.size(), req)) return;
  StridedMoveGpu(ctx, t, DTypeSize(x.dtype()), from, y.raw(), merged, y.size(), req);
}

void TransposeGpu(const OpContext& ctx, const TensorView& x, std::span<const int64_t> perm,
                  OpReq req, const TensorView& y) {
  const auto x_strides = RowMajorStrides(x.shape());
  std::vector<int64_t> stride(y.ndim());  // along y's axes
  for (int k = 0; k < y.ndim(); ++k) stride[k] = x_strides[perm[k]];
  StridedViewGpu(ctx, "transpose", x, y.shape().dims(), stride, 0, req, y);
}

}  // namespace weft::gpu
