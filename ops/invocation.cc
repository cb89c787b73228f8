#include "ops/invocation.h"

#include <algorithm>

#include "core/error.h"

namespace weft {

const ComputeFn& ComputeFor(const Op& op, Device device) {
  const ComputeFn& compute = op.compute[static_cast<int>(device.type)];
  if (!compute) WEFT_THROW("op '" << op.name << "' has no implementation for " << device);
  return compute;
}

Invocation::Invocation(const Op& op, const Attrs& attrs, Device device)
    : op_(&op), compute_(&ComputeFor(op, device)), attrs_(attrs), device_(device) {}

bool Invocation::Mutates(size_t input) const {
  const std::vector<int>& mutated = op_->mutate_inputs;
  return std::find(mutated.begin(), mutated.end(), static_cast<int>(input)) != mutated.end();
}

void Invocation::AddInput(const TensorView& view, engine::VarHandle var) {
  (Mutates(inputs_.size()) ? writes_ : reads_).push_back(var);
  inputs_.push_back(view);
}

void Invocation::AddOutput(const TensorView& view, engine::VarHandle var, OpReq req) {
  outputs_.push_back(view);
  req_.push_back(req);
  if (req != OpReq::kNull) writes_.push_back(var);
}

uint64_t Invocation::RandomDraws(bool is_train) const {
  return op_->random ? op_->random_draws(attrs_, inputs_.span(), is_train) : 0;
}

}  // namespace weft
