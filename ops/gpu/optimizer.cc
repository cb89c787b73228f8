// GPU compute of the optimizer updates of ops/optimizer/update_ops.h (sgd_update, sgd_mom_update,
// adam_update, adamw_update) on float32, float64 and bfloat16: the kernel of kernels/optimizer.cuh
// instantiated with the functors of ops/math/optimizer.h. As on the CPU, the state arrays advance
// whatever the weight's request.
#include <string>

#include "ops/gpu/internal/launch.h"
#include "ops/op.h"
#include "ops/optimizer/update_ops.h"

namespace weft::gpu {
namespace {

// in: (weight, grad, then `states` state arrays) of one shape, then with lr_input the rates
// (float64, read by the kernel: the launch's parameters stay the same when they change);
// y: the weight's shape (usually the weight).
void Update(const OpContext& ctx, const char* op, const char* functor, int states, const Attrs& a,
            std::span<const TensorView> in, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull && states == 0) return;
  const UpdateParam& p = a.Get<UpdateParam>();
  const std::string t = KernelType(op, kElementwiseTypes, in.first(2 + states), {&y, 1});
  const int64_t n = y.size();
  void* s0 = states > 0 ? in[2].raw() : nullptr;
  void* s1 = states > 1 ? in[3].raw() : nullptr;
  const void* lr = p.lr_input ? in.back().raw() : nullptr;
  Launch(ctx, "optimizer.cuh", Instance("weft::Update", {functor, t}), n, in[0].raw(), in[1].raw(),
         s0, s1, y.raw(), n, lr, p, ReqCode(req));
}

std::vector<NamedDeviceImpl> UpdateImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UPDATE_GPU(name, functor, description)                                              \
  static_assert(fn::functor::kStates <= fn::kMaxUpdateStates);                                   \
  table.push_back(                                                                               \
      {#name,                                                                                    \
       {.compute = [](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,      \
                      std::span<const OpReq> req, std::span<const TensorView> out) {             \
         Update(ctx, #name, "weft::fn::" #functor, fn::functor::kStates, a, in, req[0], out[0]); \
       }}});
  WEFT_UPDATE_OPS(WEFT_UPDATE_GPU)
#undef WEFT_UPDATE_GPU
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, UpdateImpls());

}  // namespace
}  // namespace weft::gpu
