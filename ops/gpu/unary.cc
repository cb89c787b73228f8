// GPU compute of the elementwise unary ops of ops/elementwise/unary_ops.h, their *_scalar forms,
// Activation, clip, gelu, and their backward ops, on float32, float64 and bfloat16: the kernels of
// kernels/unary.cuh instantiated with the functors of ops/math/unary.h.
#include <string>

#include "ops/elementwise/unary_ops.h"
#include "ops/gpu/internal/activation.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// x, y: any shape, one size (y may be x).
void Forward(const OpContext& ctx, const std::string& op, const std::string& functor,
             const PointwiseScalars& scalars, const TensorView& x, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, {&x, 1}, {&y, 1});
  const int v = PackWidth(x.dtype(), {x.raw(), y.raw()});
  const int64_t n = y.size();
  Launch(ctx, "unary.cuh", Instance("weft::UnaryForward", {functor, t, std::to_string(v)}),
         Packs(n, v), x.raw(), y.raw(), n, scalars.values[0], scalars.values[1], ReqCode(req));
}

// in: (dy) or (dy, x or y, as the functor's kGradReads says), one shape; dx: that shape (dx may be
// dy).
void Backward(const OpContext& ctx, const std::string& op, const std::string& functor,
              const PointwiseScalars& scalars, std::span<const TensorView> in, OpReq req,
              const TensorView& dx) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, in, {&dx, 1});
  const void* read = in.back().raw();  // dy itself when Grad reads nothing
  const int v = PackWidth(dx.dtype(), {in[0].raw(), read, dx.raw()});
  const int64_t n = dx.size();
  Launch(ctx, "unary.cuh", Instance("weft::UnaryBackward", {functor, t, std::to_string(v)}),
         Packs(n, v), in[0].raw(), read, dx.raw(), n, scalars.values[0], scalars.values[1],
         ReqCode(req));
}

using ScalarsFn = PointwiseScalars (*)(const Attrs&);

// The rows of op `op` and its backward; `scalars` (null: none) reads the functor's scalars.
void AddUnary(std::vector<NamedDeviceImpl>& table, const std::string& op,
              const std::string& functor, ScalarsFn scalars) {
  const std::string backward = "_backward_" + op;
  const auto of = [scalars](const Attrs& a) { return scalars ? scalars(a) : PointwiseScalars{}; };
  table.push_back(
      {op,
       {.compute = [=](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
         Forward(ctx, op, functor, of(a), in[0], req[0], out[0]);
       }}});
  table.push_back(
      {backward,
       {.compute = [=](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
         Backward(ctx, backward, functor, of(a), in, req[0], out[0]);
       }}});
}

void ActivationForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  Forward(ctx, "Activation", ActivationFunctor(a.Get<ActivationParam>().act_type), {}, in[0],
          req[0], out[0]);
}

void ActivationBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  Backward(ctx, "_backward_Activation", ActivationFunctor(a.Get<ActivationParam>().act_type), {},
           in, req[0], out[0]);
}

void GeluForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  Forward(ctx, "gelu", GeluFunctor(a.Get<GeluParam>()), {}, in[0], req[0], out[0]);
}

void GeluBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  Backward(ctx, "_backward_gelu", GeluFunctor(a.Get<GeluParam>()), {}, in, req[0], out[0]);
}

std::vector<NamedDeviceImpl> UnaryImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UNARY_GPU(name, functor, description, has_scalar) \
  AddUnary(table, #name, "weft::fn::" #functor, has_scalar ? AttrScalars<ScalarParam> : nullptr);
  WEFT_UNARY_OPS(WEFT_UNARY_GPU)
#undef WEFT_UNARY_GPU
  AddUnary(table, "clip", "weft::fn::Clip", AttrScalars<ClipParam>);
  table.push_back({"Activation", {.compute = ActivationForward}});
  table.push_back({"_backward_Activation", {.compute = ActivationBackward}});
  table.push_back({"gelu", {.compute = GeluForward}});
  table.push_back({"_backward_gelu", {.compute = GeluBackward}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, UnaryImpls());

}  // namespace

void LaunchActivation(const OpContext& ctx, ActType act, const TensorView& x, OpReq req,
                      const TensorView& y) {
  Forward(ctx, "Activation", ActivationFunctor(act), {}, x, req, y);
}

}  // namespace weft::gpu
