// SoftmaxCrossEntropy and its backward op on the GPU (ops/nn/softmax_cross_entropy.cc says what
// they compute), float32, float64, bfloat16 and float16 logits (the loss and lse in float32 for
// 16 bits), labels in the data's dtype or float32: one kernel each way
// (kernels/softmax_cross_entropy.cuh), a warp per row, the forward keeping each row's lse so that
// the backward reads the row once.
//
// Labels: a label that is not a class index in [0, C) fails the op with the CPU's message (the
// first such row, its label, the range), raised at the next wait on the op's outputs; the kernel
// notes it on the device and nothing waits for it (internal/bad_input.h). The row's results are
// NaN meanwhile.
#include <algorithm>
#include <span>
#include <sstream>
#include <string>

#include "core/error.h"
#include "ops/gpu/internal/bad_input.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// What ops/cpu/softmax_cross_entropy.cc throws for the label `value` of row `row`, printed as a T.
template <typename T>
DeviceErrorMessage BadLabel(const char* op, int64_t classes) {
  return [op, classes](int64_t row, double value) {
    return internal::FormatError(
        __FILE__, __LINE__,
        (std::ostringstream() << op << ": label of row " << row << " is " << static_cast<T>(value)
                              << ", expected a class index in [0, " << classes << ")")
            .str());
  };
}

// ---- compute ----

// Forward, in: (data (N, C), label (N,)), out: (loss (N,), lse (N,)); backward, in: (out_grad (N,),
// data, label, lse), out: (d_data (N, C)).
template <bool kBackward>
void SceGpu(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
            std::span<const OpReq> req, std::span<const TensorView> out) {
  if (std::all_of(req.begin(), req.end(), [](OpReq r) { return r == OpReq::kNull; })) return;
  const char* op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const TensorView& lse = kBackward ? in[3] : out[1];
  const DType dtype = data.dtype();
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16});
  const int64_t n = data.shape()[0], classes = data.shape()[1];
  // Packs of the rows read (and, backward, written): the forward's outputs are one value a row.
  int v = kBackward ? PackWidth(dtype, {data.raw(), out[0].raw()}) : PackWidth(dtype, {data.raw()});
  if (classes % v != 0) v = 1;
  const void *x = data.raw(), *labels = label.raw();
  const std::string t = TypeName(dtype), s = TypeName(lse.dtype()), l = TypeName(label.dtype()),
                    w = std::to_string(v);
  const BadItems bad(ctx, label.dtype() == DType::kFloat64 ? BadLabel<double>(op, classes)
                                                           : BadLabel<float>(op, classes));
  constexpr int64_t kWarp = 32;  // threads per row
  if (kBackward) {
    Launch(ctx, "softmax_cross_entropy.cuh", Instance("weft::SceGrad", {t, s, l, w}), n * kWarp, n,
           classes, in[0].raw(), x, labels, lse.raw(), ReqCode(req[0]), out[0].raw(), bad.slot());
  } else {
    Launch(ctx, "softmax_cross_entropy.cuh", Instance("weft::SceLoss", {t, s, l, w}), n * kWarp, n,
           classes, x, labels, ReqCode(req[0]), out[0].raw(), ReqCode(req[1]), lse.raw(),
           bad.slot());
  }
  bad.Report(label);
}

constexpr char kChecksLabels[] = "checks its labels on the device (a report per call)";
WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {
                               {"SoftmaxCrossEntropy",
                                {.compute = SceGpu<false>, .capture_barrier = kChecksLabels}},
                               {"_backward_SoftmaxCrossEntropy",
                                {.compute = SceGpu<true>, .capture_barrier = kChecksLabels}},
                           });

}  // namespace
}  // namespace weft::gpu
