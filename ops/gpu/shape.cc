// GPU compute of the shape ops of ops/tensor/shape.cc on float32, float64, bfloat16, int32, int64
// and uint8. reshape, reshape_dims, expand_dims, flatten and reshape_like copy their input
// unchanged (nothing at all when the output is the input's memory); transpose moves the elements
// with a tiled kernel where the innermost axis changes (kernels/move.cuh) and a strided copy where
// it does not. Their gradients are reshape_like and transpose again: no backward ops of their own.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "ops/gpu/internal/axes.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/move.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::gpu {
namespace {

// y = x (same size) as `req` says, on every dtype of kFillTypes.
void MoveAll(const OpContext& ctx, const TensorView& x, OpReq req, const TensorView& y) {
  const std::string t = KernelType("copy", kFillTypes, {&x, 1}, {&y, 1});
  const bool copy_gpu_adds =
      std::ranges::find(kElementwiseTypes, x.dtype()) != std::end(kElementwiseTypes);
  if (req != OpReq::kAddTo || copy_gpu_adds) return CopyGpu(ctx, x, req, y);
  const int64_t n = y.size();  // integers added to: CopyGpu adds floating-point arrays only
  StridedMoveGpu(ctx, t, DTypeSize(x.dtype()), x.raw(), y.raw(), MergeAxes({{n, {1, 1, 0}}}), n,
                 req);
}

void ReshapeCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] != OpReq::kNull) MoveAll(ctx, in[0], req[0], out[0]);
}

// The tiled kernel for a walk (array 0: y, 1: x) whose last axis is not x's innermost one, when
// both sides of a tile are at least 4 (below that a tile is mostly idle). The batch is every axis
// but those two.
bool TryTransposeTiles(const OpContext& ctx, const std::string& t, const GpuAxes& walk,
                       const TensorView& x, OpReq req, const TensorView& y) {
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
  const int64_t n_batch = y.size() / (rows * cols),
                tiles = n_batch * ((rows + 31) / 32) * ((cols + 31) / 32);
  const void* xp = x.raw();
  void* yp = y.raw();
  GpuAxes batch_walk = MergeAxes(batch);
  int64_t n = n_batch, r = rows, c = cols, y_row_stride = walk.stride[0][rows_axis],
          x_col_stride = walk.stride[1][last];
  int req_code = ReqCode(req);
  void* args[] = {&xp, &yp, &batch_walk, &n, &r, &c, &y_row_stride, &x_col_stride, &req_code};
  LaunchArgs(ctx, "move.cuh", Instance("weft::TransposeTiles", {t}), tiles, /*block_per_item=*/true,
             args);
  return true;
}

// x: (d_0, ..., d_{n-1}); y: (d_{axes[0]}, ..., d_{axes[n-1]}).
void TransposeCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("transpose", kFillTypes, in, out);
  const std::vector<int64_t> perm = TransposePermutation(a.Get<TransposeParam>(), x.ndim());
  const auto x_strides = RowMajorStrides(x.shape()), y_strides = RowMajorStrides(y.shape());
  std::vector<WalkAxis> axes;
  for (int k = 0; k < y.ndim(); ++k)
    axes.push_back({y.shape()[k], {y_strides[k], x_strides[perm[k]], 0}});
  const GpuAxes walk = MergeAxes(axes);
  if (walk.ndim <= 1) return MoveAll(ctx, x, req[0], y);  // the order does not change
  if (TryTransposeTiles(ctx, t, walk, x, req[0], y)) return;
  StridedMoveGpu(ctx, t, DTypeSize(x.dtype()), x.raw(), y.raw(), walk, y.size(), req[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {
                                                 {"reshape", {.compute = ReshapeCompute}},
                                                 {"expand_dims", {.compute = ReshapeCompute}},
                                                 {"flatten", {.compute = ReshapeCompute}},
                                                 {"reshape_like", {.compute = ReshapeCompute}},
                                                 {"reshape_dims", {.compute = ReshapeCompute}},
                                                 {"transpose", {.compute = TransposeCompute}},
                                             });

}  // namespace
}  // namespace weft::gpu
