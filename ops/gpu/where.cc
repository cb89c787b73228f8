// GPU compute of where and _backward_where (ops/elementwise/where.cc), on float32, float64 and
// bfloat16: the kernels of kernels/where.cuh with the functor of ops/math/ternary.h.
#include <array>
#include <string>
#include <vector>

#include "core/shape.h"
#include "ops/gpu/internal/axes.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// The axes of `out` with the strides of the three operands (each broadcast against `out`: 0
// where broadcast). Axes of extent 1 are left out: they move nothing.
std::vector<WalkAxis> WalkOf(const Shape& out, const std::array<Shape, 3>& operands) {
  std::array<std::array<int64_t, Shape::kMaxDims>, 3> s;
  for (int k = 0; k < 3; ++k) s[k] = BroadcastStrides(operands[k], out);
  std::vector<WalkAxis> axes;
  for (int d = 0; d < out.ndim(); ++d) {
    if (out[d] != 1) axes.push_back(WalkAxis{out[d], {s[0][d], s[1][d], s[2][d]}});
  }
  return axes;
}

// in: (condition, a, b), broadcastable; out: their broadcast shape.
void WhereCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("where", kElementwiseTypes, in, out);
  const Shape& y = out[0].shape();
  const GpuAxes axes = MergeAxes(WalkOf(y, {in[0].shape(), in[1].shape(), in[2].shape()}));
  Launch(ctx, "where.cuh", Instance("weft::WhereForward", {t}), y.Size(), in[0].raw(), in[1].raw(),
         in[2].raw(), out[0].raw(), axes, y.Size(), ReqCode(req[0]));
}

// The gradient of operand `side` (0: a, 1: b) into `grad`, of its shape.
void WhereGrad(const OpContext& ctx, const std::string& t, int side, std::span<const TensorView> in,
               OpReq req, const TensorView& grad) {
  if (req == OpReq::kNull) return;
  const Shape& dy = in[0].shape();
  std::vector<WalkAxis> kept, reduced;
  for (WalkAxis x : WalkOf(dy, {dy, in[1].shape(), in[2 + side].shape()})) {
    const bool broadcast = x.stride[2] == 0;
    x.stride[2] = 0;  // the walks carry dy (0) and condition (1) only
    (broadcast ? reduced : kept).push_back(x);
  }
  int64_t n_out = grad.size(), n_reduced = n_out == 0 ? 0 : dy.Size() / n_out;
  void *g = in[0].raw(), *c = in[1].raw(), *out = grad.raw();
  GpuAxes kept_axes = MergeAxes(kept), reduced_axes = MergeAxes(reduced);
  int req_code = ReqCode(req);
  void* args[] = {&g, &c, &out, &kept_axes, &reduced_axes, &n_out, &n_reduced, &req_code};
  LaunchArgs(ctx, "where.cuh", Instance("weft::WhereGrad", {t, std::to_string(side)}), n_out,
             /*block_per_item=*/false, args);
}

// in: (dy, condition, a, b), dy of the broadcast shape; out: (d a, d b).
void WhereBackwardCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string t = KernelType("_backward_where", kElementwiseTypes, in.first(2), out);
  WhereGrad(ctx, t, 0, in, req[0], out[0]);
  WhereGrad(ctx, t, 1, in, req[1], out[1]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"where", {.compute = WhereCompute}},
                               {"_backward_where", {.compute = WhereBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::gpu
