// GPU compute of the elementwise binary ops of ops/elementwise/binary_ops.h with broadcasting, of
// their _backward_* ops (the gradient of a broadcast operand summed over the axes it was
// broadcast along), and of add_n, on float32, float64 and bfloat16: the kernels of
// kernels/binary.cuh instantiated with the functors of ops/math/binary.h.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/shape.h"
#include "ops/elementwise/binary_ops.h"
#include "ops/gpu/internal/axes.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// One axis of a broadcast walk: its extent and the stride of the output (0), lhs (1), rhs (2).
using Axis = WalkAxis;

// The axes of `out`, with each operand aligned at its last axis and stride 0 where broadcast.
// Axes of extent 1 are left out: they move nothing.
std::vector<Axis> BroadcastAxes(const Shape& out, const Shape& l, const Shape& r) {
  const std::array<int64_t, Shape::kMaxDims> so = BroadcastStrides(out, out),
                                             sl = BroadcastStrides(l, out),
                                             sr = BroadcastStrides(r, out);
  std::vector<Axis> axes(out.ndim());
  for (int d = 0; d < out.ndim(); ++d) axes[d] = Axis{out[d], {so[d], sl[d], sr[d]}};
  std::erase_if(axes, [](const Axis& x) { return x.dim == 1; });
  return axes;
}

// in: (lhs, rhs), broadcastable; out: their broadcast shape (may be lhs or rhs when it has that
// shape).
void Forward(const OpContext& ctx, const std::string& op, const std::string& functor,
             std::span<const TensorView> in, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, in, {&y, 1});
  const int64_t n = y.size();
  if (in[0].shape() == in[1].shape()) {
    const int v = PackWidth(y.dtype(), {in[0].raw(), in[1].raw(), y.raw()});
    Launch(ctx, "binary.cuh", Instance("weft::BinaryForward", {functor, t, std::to_string(v)}),
           Packs(n, v), in[0].raw(), in[1].raw(), y.raw(), n, ReqCode(req));
    return;
  }
  const GpuAxes axes = MergeAxes(BroadcastAxes(y.shape(), in[0].shape(), in[1].shape()));
  Launch(ctx, "binary.cuh", Instance("weft::BinaryBroadcast", {functor, t}), n, in[0].raw(),
         in[1].raw(), y.raw(), axes, n, ReqCode(req));
}

// The gradient of operand `side` (0: lhs, 1: rhs) of a broadcast op, summed into its shape.
void ReduceGradient(const OpContext& ctx, const std::string& functor, const std::string& t,
                    int side, std::span<const TensorView> in, OpReq req, const TensorView& grad) {
  if (req == OpReq::kNull) return;
  std::vector<Axis> kept, reduced;
  for (const Axis& x : BroadcastAxes(in[0].shape(), in[1].shape(), in[2].shape())) {
    (x.stride[1 + side] == 0 ? reduced : kept).push_back(x);
  }
  // A thread per element where there are enough of them to fill the GPU, else a block each.
  int64_t n_out = grad.size(), n_reduced = n_out == 0 ? 0 : in[0].size() / n_out;
  const bool per_block = n_out < (1 << 16);
  const std::string name =
      Instance(per_block ? "weft::BinaryGradPerBlock" : "weft::BinaryGradPerThread",
               {functor, std::to_string(side), t});
  void *dy = in[0].raw(), *l = in[1].raw(), *r = in[2].raw(), *g = grad.raw();
  GpuAxes kept_axes = MergeAxes(kept), reduced_axes = MergeAxes(reduced);
  int req_code = ReqCode(req);
  void* args[] = {&dy, &l, &r, &g, &kept_axes, &reduced_axes, &n_out, &n_reduced, &req_code};
  LaunchArgs(ctx, "binary.cuh", name, n_out, per_block, args);
}

// in: (dy, lhs, rhs), dy of the broadcast shape; out: (dlhs, drhs), of the operands' shapes.
void Backward(const OpContext& ctx, const std::string& op, const std::string& functor,
              std::span<const TensorView> in, std::span<const OpReq> req,
              std::span<const TensorView> out) {
  const std::string t = KernelType(op, kElementwiseTypes, in, out);
  if (in[1].shape() != in[2].shape()) {
    ReduceGradient(ctx, functor, t, 0, in, req[0], out[0]);
    ReduceGradient(ctx, functor, t, 1, in, req[1], out[1]);
    return;
  }
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull) return;
  const int64_t n = in[0].size();
  const int v =
      PackWidth(in[0].dtype(), {in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), out[1].raw()});
  Launch(ctx, "binary.cuh", Instance("weft::BinaryBackward", {functor, t, std::to_string(v)}),
         Packs(n, v), in[0].raw(), in[1].raw(), in[2].raw(), out[0].raw(), out[1].raw(), n,
         ReqCode(req[0]), ReqCode(req[1]));
}

// The rows of op `op` and its backward.
void AddBinary(std::vector<NamedDeviceImpl>& table, const std::string& op,
               const std::string& functor) {
  const std::string backward = "_backward_" + op;
  table.push_back(
      {op,
       {.compute = [=](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
         Forward(ctx, op, functor, in, req[0], out[0]);
       }}});
  table.push_back(
      {backward,
       {.compute = [=](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
         Backward(ctx, backward, functor, in, req, out);
       }}});
}

// in: num_args arrays of one shape; out: that shape (may be in[0]). Sums kGpuMaxAddN inputs per
// launch; the launches after the first add to the output.
void AddNCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("add_n", kElementwiseTypes, in, out);
  const int64_t n = out[0].size();
  int v = PackWidth(out[0].dtype(), {out[0].raw()});
  for (const TensorView& x : in) v = std::min(v, PackWidth(x.dtype(), {x.raw()}));
  for (size_t first = 0; first < in.size(); first += kGpuMaxAddN) {
    GpuAddNArgs args{};
    args.count = static_cast<int>(std::min<size_t>(kGpuMaxAddN, in.size() - first));
    for (int k = 0; k < args.count; ++k) args.in[k] = in[first + k].raw();
    const OpReq chunk_req = first == 0 ? req[0] : OpReq::kAddTo;
    Launch(ctx, "binary.cuh", Instance("weft::AddN", {t, std::to_string(v)}), Packs(n, v), args,
           out[0].raw(), n, ReqCode(chunk_req));
  }
}

std::vector<NamedDeviceImpl> BinaryImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_BINARY_GPU(name, functor, description) AddBinary(table, #name, "weft::fn::" #functor);
  WEFT_BINARY_OPS(WEFT_BINARY_GPU)
#undef WEFT_BINARY_GPU
  table.push_back({"add_n", {.compute = AddNCompute}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, BinaryImpls());

}  // namespace
}  // namespace weft::gpu
