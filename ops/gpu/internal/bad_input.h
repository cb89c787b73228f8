// Bad input that a GPU op's kernels find (a label that is not a class, an index outside a table),
// raised as the weft::Error its CPU compute throws, at the next wait on the op's outputs: the
// kernels note the bad items, a last kernel reports the first one, and the engine raises it with
// the op's completion (engine/gpu/device_error.h). Nothing waits and nothing traps.
//
//   const BadItems bad(ctx, [classes](int64_t row, double label) { return "..."; });
//   Launch(ctx, "softmax_cross_entropy.cuh", kernel, items, ..., bad.slot());  // NoteBadItem(slot,
//   row) bad.Report(label);   // after the kernels that check: item `row` of `label` is the bad
//   value
#pragma once

#include "core/tensor_view.h"
#include "engine/gpu/device_error.h"
#include "ops/gpu/kernels/params.cuh"
#include "ops/op.h"

namespace weft::gpu {

class BadItems {
 public:
  // A check by the op running with `ctx`, on its stream. `message(item, value)`: the whole
  // message for the smallest bad item (with a file:line, as WEFT_THROW writes it).
  BadItems(const OpContext& ctx, DeviceErrorMessage message);
  // For the kernels that check, by value.
  const GpuErrorSlot& slot() const { return slot_; }
  // Queues the report of the smallest item noted, whose value is values[item] (float32 or
  // float64, int32 or int64), after the kernels that check: exactly once, before the op returns.
  void Report(const TensorView& values) const;

 private:
  const OpContext& ctx_;
  GpuErrorSlot slot_;
};

}  // namespace weft::gpu
