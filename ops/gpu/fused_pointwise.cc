// GPU compute of _fused_pointwise (ops/fusion/fused_group.h): the group's generated kernel, or its
// unfused steps where that kernel cannot be used (ops/gpu/fusion/fused_kernel.h). A bound graph
// prepares each fused node at Bind, so the kernel is compiled (or read from the kernel library's
// caches) then, never inside Forward; a call that was not prepared prepares itself, which the
// library's caches make cheap after the first time.
#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/fused_kernel.h"
#include "ops/gpu/rtc/kernel_library.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

ComputeFn PrepareFused(const Attrs& attrs, Device device, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  return PrepareFusedGpu(attrs.Get<FusedParam>().group, device, in, req, out,
                         rtc::KernelLibrary::Global(),
                         /*at_bind=*/true);
}

void FusedCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const ComputeFn run = PrepareFusedGpu(attrs.Get<FusedParam>().group, ctx.run.device, in, req, out,
                                        rtc::KernelLibrary::Global(), /*at_bind=*/false);
  run(ctx, attrs, in, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {{"_fused_pointwise",
                             {.compute = FusedCompute, .prepare = PrepareFused}}});

}  // namespace
}  // namespace weft::gpu
