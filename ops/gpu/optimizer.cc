// GPU compute of the optimizer updates of ops/optimizer/update_ops.h (sgd_update, sgd_mom_update,
// adam_update, adamw_update) on float32, float64 and bfloat16, with a bfloat16 copy of the new
// weight when asked (UpdateParam::copy), and the loss scaler's step (amp_update_scale): the kernels
// of kernels/optimizer.cuh instantiated with the functors of ops/math/optimizer.h. As on the CPU,
// the state arrays advance whatever the weight's request.
#include <string>

#include "ops/gpu/internal/launch.h"
#include "ops/op.h"
#include "ops/optimizer/update_ops.h"

namespace weft::gpu {
namespace {

// in: (weight, grad, then `states` state arrays) of one shape, then with scale_input the
// gradient's multiplier (float32, read by the kernel, which writes nothing when it is not finite),
// then with lr_input the rates (float64, read by the kernel: the launch's parameters stay the same
// when they change);
// out: the weight's shape (usually the weight), then its copy (UpdateParam::copy), written.
void Update(const OpContext& ctx, const char* op, const char* functor, int states, const Attrs& a,
            std::span<const TensorView> in, std::span<const OpReq> req,
            std::span<const TensorView> out) {
  const TensorView& y = out[0];
  const bool copy = out.size() > 1 && req[1] != OpReq::kNull;
  if (req[0] == OpReq::kNull && states == 0 && !copy) return;
  if (copy && req[1] == OpReq::kAddTo)
    WEFT_THROW(op << ": the weight's copy is written, never added to");
  const UpdateParam& p = a.Get<UpdateParam>();
  const std::string t = KernelType(op, kElementwiseTypes, in.first(2 + states), {&y, 1});
  const std::string c = copy ? KernelType(op, kElementwiseTypes, {}, out.subspan(1, 1)) : t;
  const int64_t n = y.size();
  void* s0 = states > 0 ? in[2].raw() : nullptr;
  void* s1 = states > 1 ? in[3].raw() : nullptr;
  const void* lr = p.lr_input ? in.back().raw() : nullptr;
  const void* scale = p.scale_input ? in[2 + states].raw() : nullptr;
  void* copy_data = copy ? out[1].raw() : nullptr;
  Launch(ctx, "optimizer.cuh", Instance("weft::Update", {functor, t, c}), n, in[0].raw(),
         in[1].raw(), s0, s1, y.raw(), copy_data, n, lr, scale, p, ReqCode(req[0]));
}

std::vector<NamedDeviceImpl> UpdateImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UPDATE_GPU(name, functor, description)                                         \
  static_assert(fn::functor::kStates <= fn::kMaxUpdateStates);                              \
  table.push_back(                                                                          \
      {#name,                                                                               \
       {.compute = [](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, \
                      std::span<const OpReq> req, std::span<const TensorView> out) {        \
         Update(ctx, #name, "weft::fn::" #functor, fn::functor::kStates, a, in, req, out);  \
       }}});
  WEFT_UPDATE_OPS(WEFT_UPDATE_GPU)
#undef WEFT_UPDATE_GPU
  table.push_back(
      {"amp_update_scale",
       {.compute = [](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
         void* m = req[0] == OpReq::kNull ? nullptr : out[0].raw();
         Launch(ctx, "optimizer.cuh", "weft::UpdateLossScale", 1, in[0].raw(), in[1].raw(),
                in[2].raw(), m, a.Get<fn::LossScaleParam>());
       }}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, UpdateImpls());

}  // namespace
}  // namespace weft::gpu
