// A fused group run unfused on a GPU, for a group whose generated kernel cannot be used (it did
// not compile, or cannot launch): the steps one after another through each op's own GPU compute
// (ops/fusion/internal/step_plan.h) over whole tensors, the values between steps in scratch memory
// allocated when it is built (for a bound graph: once, at Bind) and freed with it after the work
// queued on it (device_memory.h).
//
//   FusedFallback fallback(group, Device::Gpu(0), req);
//   fallback.Run(ctx, inputs, outputs);   // on the op's stream, like the unfused ops
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/tensor_view.h"
#include "ops/fusion/fused_group.h"
#include "ops/fusion/internal/step_plan.h"
#include "ops/gpu/fusion/device_memory.h"
#include "ops/op.h"

namespace weft::gpu {

class FusedFallback {
 public:
  // `req`: one per output of the group.
  FusedFallback(std::shared_ptr<const FusedGroup> group, Device device, std::span<const OpReq> req);

  // Const, and safe to call from several threads at once (each call has its own value views);
  // calls on one stream share the scratch arrays, which the stream orders.
  void Run(const OpContext& ctx, std::span<const TensorView> inputs,
           std::span<const TensorView> outputs) const;

 private:
  std::shared_ptr<const FusedGroup> group_;
  StepPlan plan_;
  std::vector<DeviceMemory> slots_;
  std::vector<TensorView>
      values_;  // scratch values on their slots, unused ones unbound; the rest set by Run
};

}  // namespace weft::gpu
