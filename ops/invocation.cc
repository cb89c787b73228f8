#include "ops/invocation.h"

#include "core/error.h"

namespace weft {

const ComputeFn& ComputeFor(const Op& op, Device device) {
  const ComputeFn& compute = op.compute[static_cast<int>(device.type)];
  if (!compute) WEFT_THROW("op '" << op.name << "' has no implementation for " << device);
  return compute;
}

Invocation::Invocation(const Op& op, const Attrs& attrs, Device device)
    : op_(&op), compute_(&ComputeFor(op, device)), attrs_(attrs), device_(device) {}

}  // namespace weft
