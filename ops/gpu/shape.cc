// GPU compute of the shape ops of ops/tensor/shape.cc on float32, float64, bfloat16, int32, int64
// and uint8. reshape, reshape_dims, expand_dims, flatten and reshape_like copy their input
// unchanged (nothing at all when the output is the input's memory); transpose moves the elements
// with a tiled kernel where the innermost axis changes (kernels/move.cuh) and a strided copy where
// it does not; _strided_copy the same for any strided view. Their gradients are reshape_like and
// transpose again: no backward ops of their own.
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

// x: (d_0, ..., d_{n-1}); y: (d_{axes[0]}, ..., d_{axes[n-1]}).
void TransposeCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::vector<int64_t> perm = TransposePermutation(a.Get<TransposeParam>(), in[0].ndim());
  TransposeGpu(ctx, in[0], perm, req[0], out[0]);
}

// y = the view of x that the attributes give (ops/tensor/tensor_params.h).
void StridedCopyCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  const StridedCopyParam& p = a.Get<StridedCopyParam>();
  StridedViewGpu(ctx, "_strided_copy", in[0], p.walk, p.stride, p.offset, req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {
                                                 {"reshape", {.compute = ReshapeCompute}},
                                                 {"expand_dims", {.compute = ReshapeCompute}},
                                                 {"flatten", {.compute = ReshapeCompute}},
                                                 {"reshape_like", {.compute = ReshapeCompute}},
                                                 {"reshape_dims", {.compute = ReshapeCompute}},
                                                 {"transpose", {.compute = TransposeCompute}},
                                                 {"_strided_copy", {.compute = StridedCopyCompute}},
                                             });

}  // namespace
}  // namespace weft::gpu
