#include "ops/gpu/internal/scatter_sum.h"

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"

namespace weft::gpu {

ScatterSum::ScatterSum(const OpContext& ctx, const TensorView& out, OpReq req)
    : ctx_(ctx), out_(out), req_(req), target_(out.raw()) {
  const size_t floats = static_cast<size_t>(out.size()) * sizeof(float);
  if (Is16BitFloat(out.dtype())) {
    target_ = GpuCall(ctx).Workspace({floats})[0];
    StreamOf(ctx).Memset(target_, 0, floats);
  } else if (req != OpReq::kAddTo) {
    FillGpu(ctx, 0, OpReq::kWrite, out);
  }
}

void ScatterSum::Finish() const {
  if (!Is16BitFloat(out_.dtype())) return;
  Launch(ctx_, "scatter_sum.cuh", Instance("weft::StoreScatterSum", {TypeName(out_.dtype())}),
         out_.size(), static_cast<const void*>(target_), out_.raw(), out_.size(), ReqCode(req_));
}

}  // namespace weft::gpu
