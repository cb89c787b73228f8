// GPU compute of Dropout (ops/nn/dropout.cc) on float32, float64 and bfloat16. In training the
// mask comes from the op's RandomKey through the same Philox4x32-10 numbers and the same
// uniform conversion as on the CPU, so a seed gives the same mask on either device. Its
// gradient is the `mul` op (binary.cc).
#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// data: any shape; out[0] (result) and out[1] (mask): data's shape (out[0] may be data).
void DropoutCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const double p = a.Get<DropoutParam>().p;
  const std::string t = KernelType("Dropout", kElementwiseTypes, in, out);
  if (!ctx.is_train || p == 0) {
    CopyGpu(ctx, in[0], req[0], out[0]);
    FillGpu(ctx, 1, req[1], out[1]);
    return;
  }
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull) return;
  const int64_t n = in[0].size();
  // Packs of four (one Philox block) where all three arrays allow it.
  const size_t four = 4 * DTypeSize(in[0].dtype());
  bool aligned = true;
  for (const void* ptr : {in[0].raw(), out[0].raw(), out[1].raw()})
    aligned &= reinterpret_cast<uintptr_t>(ptr) % four == 0;
  Launch(ctx, "dropout.cuh", Instance("weft::DropoutTrain", {t, aligned ? "4" : "1"}), (n + 3) / 4,
         in[0].raw(), out[0].raw(), out[1].raw(), n,
         static_cast<unsigned long long>(ctx.random.seed),
         static_cast<unsigned long long>(ctx.random.offset), ctx.random.shift, p, 1 / (1 - p),
         ReqCode(req[0]), ReqCode(req[1]));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {
                                                 {"Dropout", {.compute = DropoutCompute}},
                                             });

}  // namespace
}  // namespace weft::gpu
