#include "ops/gpu/fusion/fallback.h"

#include <algorithm>

namespace weft::gpu {

FusedFallback::FusedFallback(std::shared_ptr<const FusedGroup> group, Device device,
                             std::span<const OpReq> req)
    : group_(std::move(group)), plan_(*group_, device, req) {
  const FusedGroup& g = *group_;
  std::vector<size_t> slot_bytes(plan_.num_slots(), 0);  // the widest value of each slot
  for (uint32_t v = g.num_inputs; v < g.num_values(); ++v) {
    const int slot = plan_.slot(v);
    if (slot >= 0)
      slot_bytes[slot] = std::max(slot_bytes[slot], g.shapes[v].Size() * DTypeSize(g.dtypes[v]));
  }
  for (size_t bytes : slot_bytes) slots_.emplace_back(device, bytes);
  values_.resize(g.num_values());
  for (uint32_t v = g.num_inputs; v < g.num_values(); ++v) {
    const int slot = plan_.slot(v);
    values_[v] =
        TensorView(slot >= 0 ? slots_[slot].data() : nullptr, g.shapes[v], g.dtypes[v], device);
  }
}

void FusedFallback::Run(const OpContext& ctx, std::span<const TensorView> inputs,
                        std::span<const TensorView> outputs) const {
  std::vector<TensorView> values = values_;
  std::copy(inputs.begin(), inputs.end(), values.begin());
  plan_.Run(ctx, StepPlan::Layout::kWholeTensors, values, outputs, /*broadcast=*/{});
}

}  // namespace weft::gpu
