// SoftmaxCrossEntropy and its backward op on the GPU (ops/nn/softmax_cross_entropy.cc says what
// they compute), float32 and float64: one kernel each way (kernels/softmax_cross_entropy.cuh),
// a warp per row.
//
// Labels: the CPU op raises a weft::Error for a label that is not a class index in [0, C); here
// the labels live on the GPU, and checking them on the host would synchronize the stream. So the
// GPU op writes NaN instead: the row's loss, and every d_data element of that row.
#include <span>
#include <string>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// ---- compute ----

// Forward, in: (data (N, C), label (N,)), out: (loss (N,)); backward, in: (out_grad (N,), data,
// label), out: (d_data (N, C)).
template <bool kBackward>
void SceGpu(const OpContext& ctx, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
            std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const char* op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const DType dtype = data.dtype();
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64});
  const int64_t n = data.shape()[0], classes = data.shape()[1];
  const int accumulate = req[0] == OpReq::kAddTo ? 1 : 0;
  const void *x = data.raw(), *labels = label.raw();
  void* result = out[0].raw();
  const std::string t = TypeName(dtype);
  constexpr int64_t kWarp = 32;  // threads per row
  if (kBackward) {
    Launch(ctx, "softmax_cross_entropy.cuh", Instance("weft::SceGrad", {t}), n * kWarp, n, classes, in[0].raw(), x,
           labels, accumulate, result);
  } else {
    Launch(ctx, "softmax_cross_entropy.cuh", Instance("weft::SceLoss", {t}), n * kWarp, n, classes, x, labels,
           accumulate, result);
  }
}

WEFT_REGISTER_COMPUTE(SoftmaxCrossEntropy, DeviceType::kGpu, SceGpu<false>);
WEFT_REGISTER_COMPUTE(_backward_SoftmaxCrossEntropy, DeviceType::kGpu, SceGpu<true>);

}  // namespace
}  // namespace weft::gpu
