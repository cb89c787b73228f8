#include "tests/backward_hook_op.h"

#include <cstring>
#include <span>
#include <vector>

#include "ops/op.h"

namespace weft {
namespace {

void CopyFirstInput(std::span<const TensorView> in, std::span<const TensorView> out) {
  std::memcpy(out[0].raw(), in[0].raw(), in[0].size() * DTypeSize(in[0].dtype()));
}

std::vector<Shape> SameShape(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

}  // namespace

bool RegisterBackwardHookOp(const std::string& name, std::function<void()> hook) {
  const std::string backward = "_backward_" + name;
  RegisterOp(name)
      .Describe("identity (test only)")
      .Inputs({"data"})
      .InferShape(SameShape)
      .Gradient([backward](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op(backward, {g.OutGrad(0)}));
      });
  RegisterOp(backward)
      .Describe("identity that first runs the test's hook (test only)")
      .Inputs({"out_grad"})
      .InferShape(SameShape);
  auto identity = [](const OpContext&, const Attrs&, std::span<const TensorView> in,
                     std::span<const OpReq>,
                     std::span<const TensorView> out) { CopyFirstInput(in, out); };
  auto hooked = [hook = std::move(hook)](const OpContext&, const Attrs&,
                                         std::span<const TensorView> in, std::span<const OpReq>,
                                         std::span<const TensorView> out) {
    hook();
    CopyFirstInput(in, out);
  };
  RegisterDeviceImpls(DeviceType::kCpu,
                      {{name, {.compute = identity}}, {backward, {.compute = hooked}}});
  return true;
}

}  // namespace weft
