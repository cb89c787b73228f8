#include "ops/invocation.h"

#include "core/error.h"

namespace weft {

const ComputeFn& ComputeFor(const Op& op, Device device) {
  const ComputeFn& compute = op.On(device.type).compute;
  if (!compute) WEFT_THROW("op '" << op.name << "' has no implementation for " << device);
  return compute;
}

Invocation::Invocation(const Op& op, const Attrs& attrs, Device device)
    : op_(&op), compute_(&ComputeFor(op, device)), attrs_(attrs), device_(device) {}

void Invocation::Prepare() {
  const PrepareFn& prepare = op_->On(device_.type).prepare;
  if (!prepare) return;
  prepared_ = std::make_shared<const ComputeFn>(
      prepare(attrs_, device_, inputs_.span(), req_.span(), outputs_.span()));
  compute_ = prepared_.get();
}

}  // namespace weft
