// The device table of the reductions (WEFT_REDUCE_OPS): a device's compute file passes its forward
// and backward computes, which take the op's name and kind before the usual arguments, and
// registers the rows this returns.
//
//   WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, ReduceImpls(ReduceCompute,
//   ReduceBackwardCompute));
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {

using ReduceComputeFn = void (*)(const std::string& op, ReduceKind kind, const OpContext& ctx,
                                 const Attrs& attrs, std::span<const TensorView> inputs,
                                 std::span<const OpReq> req, std::span<const TensorView> outputs);

// One row per reduction and one per its backward op.
inline std::vector<NamedDeviceImpl> ReduceImpls(ReduceComputeFn forward, ReduceComputeFn backward) {
  std::vector<NamedDeviceImpl> table;
  const auto add = [&](const std::string& op, ReduceKind kind) {
    table.push_back({op, {.compute = std::bind_front(forward, op, kind)}});
    table.push_back({"_backward_" + op, {.compute = std::bind_front(backward, op, kind)}});
  };
#define WEFT_REDUCE_ROW(name, kind, description) add(#name, ReduceKind::kind);
  WEFT_REDUCE_OPS(WEFT_REDUCE_ROW)
#undef WEFT_REDUCE_ROW
  return table;
}

}  // namespace weft
