// The GPU compute of a fused group (ops/fusion/fused_group.h) for one call's tensors: its
// generated kernel (codegen.h), compiled through a kernel library when it is prepared and
// launched on the op's stream, never synchronizing; or, where that kernel cannot be used (it does
// not compile, or cannot launch), the group's unfused steps (fallback.h), after one warning on
// stderr naming the group and the reason. Training goes on either way. ops/gpu/fused_pointwise.cc
// registers it as _fused_pointwise's GPU compute.
//
// What is decided when it is prepared, from the tensors (whose pointers never move after):
//   - the pack width: 32-byte packs (two 16-byte accesses) of the full-size tensors' loads and
//     stores when every one of their pointers is aligned to its pack, else one element at a
//     time; and one element at a time for a kernel of more than 1,024 steps, whose code packs
//     would multiply by five (a pack and the tail) and its compile time with them (3,000
//     outputs: 18 s of CPU instead of 4);
//   - the index type: int when the element count plus the grid's threads fit in it, else long long;
//   - where the arguments go: by value when they fit the device's parameter budget
//     (param_budget.h, PlaceParams), else in a table in device memory (built once when prepared at
//     bind time, per call otherwise) that the kernel reads through one pointer. By-value arguments
//     over 4,096 bytes are launched directly rather than in the stream's graph batch: CUDA graph
//     kernel nodes have crashed on them (openxla/xla#19252), and a direct launch's failure is this
//     kernel's own, so it falls back.
//
// Switches for tests only (read when a group is prepared):
//   WEFT_FUSION_TEST_BAD_CODE=1      the generator emits code NVRTC rejects (the fallback)
//   WEFT_FUSION_TEST_INDEX64=1       64-bit indexing whatever the element count
//   WEFT_FUSION_TEST_PARAM_BUDGET=N  a parameter budget of N bytes (small groups take the table)
//
//   ComputeFn run = PrepareFusedGpu(group, Device::Gpu(0), in, req, out, KernelLibrary::Global(),
//   true); run(ctx, attrs, in, req, out);    // on a GPU worker
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/device.h"
#include "core/tensor_view.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/rtc/kernel_library.h"
#include "ops/op.h"

namespace weft::gpu {

// What preparations chose, since the process started (for tests and benchmarks).
struct FusedGpuStats {
  int64_t kernels = 0;     // prepared as a generated kernel
  int64_t vectorized = 0;  // ... with 32-byte packs
  int64_t tables = 0;      // ... with the arguments in a device table
  int64_t index64 = 0;     // ... with 64-bit indexing
  int64_t direct = 0;      // ... launched directly (by-value arguments over 4,096 bytes)
  int64_t fallbacks = 0;   // prepared (or switched at a failed launch) to run unfused
};
FusedGpuStats GetFusedGpuStats();

// The compute for `group` on these tensors (inputs, output requests and outputs of the fused
// node), compiling with `library`. `at_bind`: prepared outside any engine op for tensors that never
// move (a bound graph's node), so the argument table, if any, is uploaded now and kept; otherwise
// (a call prepared inside its own op) the table goes into the op's workspace on each call.
ComputeFn PrepareFusedGpu(std::shared_ptr<const FusedGroup> group, Device device,
                          std::span<const TensorView> inputs, std::span<const OpReq> req,
                          std::span<const TensorView> outputs, rtc::KernelLibrary& library,
                          bool at_bind);

}  // namespace weft::gpu
