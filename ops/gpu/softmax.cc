// softmax, log_softmax and their backward ops on the GPU, through cuDNN (ops/nn/softmax.cc says
// what they compute). float32 and float64. The forward may write over data and the backward over
// out_grad (req kWriteInplace, the ops' declared in-place pair): cuDNN does not promise in-place
// softmax, so such a call computes into the workspace and copies the result over its input.
#include <span>
#include <string>

#include "ops/gpu/internal/cudnn_softmax.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// Forward, in: (data); backward, in: (out_grad, output). out: (output) or (d_data).
ComputeFn SoftmaxGpu(const std::string& op, bool log, bool backward) {
  return [op, log, backward](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                             std::span<const OpReq> req, std::span<const TensorView> out) {
    if (req[0] == OpReq::kNull) return;
    const Shape& s = in[0].shape();
    const int axis = a.Get<SoftmaxParam>().axis;  // in range: shape inference checked it
    const SoftmaxRows rows = SoftmaxRowsOf(s, axis < 0 ? axis + s.ndim() : axis);
    const DType dtype = in[0].dtype();
    CheckDType(op.c_str(), dtype, {DType::kFloat32, DType::kFloat64});
    const GpuCall call(ctx);
    const bool aliased = out[0].raw() == in[0].raw() || (backward && out[0].raw() == in[1].raw());
    void* target = aliased ? call.Workspace({out[0].bytes()})[0] : out[0].raw();
    const OpReq target_req = aliased ? OpReq::kWrite : req[0];
    if (backward) {
      SoftmaxBackward(call, dtype, rows, log, in[0].raw(), in[1].raw(), target_req, target);
    } else {
      SoftmaxForward(call, dtype, rows, log, in[0].raw(), target_req, target);
    }
    if (aliased) call.stream().Copy(out[0].raw(), target, out[0].bytes(), cudaMemcpyDeviceToDevice);
  };
}

WEFT_REGISTER_DEVICE_IMPLS(
    DeviceType::kGpu,
    {
        {"softmax", {.compute = SoftmaxGpu("softmax", false, false)}},
        {"_backward_softmax", {.compute = SoftmaxGpu("_backward_softmax", false, true)}},
        {"log_softmax", {.compute = SoftmaxGpu("log_softmax", true, false)}},
        {"_backward_log_softmax", {.compute = SoftmaxGpu("_backward_log_softmax", true, true)}},
    });

}  // namespace
}  // namespace weft::gpu
