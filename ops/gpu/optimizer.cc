// GPU compute of the optimizer updates of ops/cpu/optimizer.cc (sgd_update, sgd_mom_update,
// adam_update) on float32 and float64, with the CPU's order of operations. As on the CPU,
// sgd_mom_update with a null request leaves the momentum alone, while adam_update still
// updates its moments.
#include "ops/gpu/internal/attrs.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// in: (weight, grad[, state...]) of one shape; out: the weight's shape (usually the weight).
void Update(const OpContext& ctx, const char* op, const char* kernel, const Attrs& a, std::span<const TensorView> in,
            OpReq req, const TensorView& y) {
  const std::string t = KernelType(op, kElementwiseTypes, in, {&y, 1});
  const int64_t n = y.size();
  const GpuUpdateParams p = UpdateAttrs(op, a);
  switch (in.size()) {
    case 2:
      Launch(ctx, "optimizer.cuh", Instance(kernel, {t}), n, in[0].raw(), in[1].raw(), y.raw(), n, p, ReqCode(req));
      return;
    case 3:
      Launch(ctx, "optimizer.cuh", Instance(kernel, {t}), n, in[0].raw(), in[1].raw(), in[2].raw(), y.raw(), n, p,
             ReqCode(req));
      return;
    default:
      Launch(ctx, "optimizer.cuh", Instance(kernel, {t}), n, in[0].raw(), in[1].raw(), in[2].raw(), in[3].raw(),
             y.raw(), n, p, ReqCode(req));
  }
}

void SgdCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                std::span<const TensorView> out) {
  if (req[0] != OpReq::kNull) Update(ctx, "sgd_update", "weft::SgdUpdate", a, in, req[0], out[0]);
}

void SgdMomCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                   std::span<const TensorView> out) {
  if (req[0] != OpReq::kNull) Update(ctx, "sgd_mom_update", "weft::SgdMomUpdate", a, in, req[0], out[0]);
}

void AdamCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  Update(ctx, "adam_update", "weft::AdamUpdate", a, in, req[0], out[0]);
}

WEFT_REGISTER_COMPUTE(sgd_update, DeviceType::kGpu, SgdCompute);
WEFT_REGISTER_COMPUTE(sgd_mom_update, DeviceType::kGpu, SgdMomCompute);
WEFT_REGISTER_COMPUTE(adam_update, DeviceType::kGpu, AdamCompute);

}  // namespace
}  // namespace weft::gpu
