// How many bytes of parameters a kernel launched on a device may take, and where a fused kernel's
// arguments go under that budget: the rule alone, device-free, so that it builds in every
// configuration (//ops/gpu:fusion_plan) and CPU tests can check a real graph's fused groups
// against it; the facts of a real device are asked by device_param_budget.h (CUDA builds only).
// CUDA 12.1 raised the limit from 4,096 bytes to 32,764 on compute capability 7.0 and newer; it
// holds where the runtime, the driver (which launches) and NVRTC (which compiles) are all 12.1 or
// newer. There is no device attribute for it (cudaDeviceGetAttribute and cudaDeviceProp have none).
//
//   const ParamPlacement p = PlaceParams(plan.bytes, KernelParamBudget(device));
//   if (p.table) ...   // arguments in a table in device memory, the kernel takes one pointer
#pragma once

#include <cstddef>

namespace weft::gpu {

inline constexpr size_t kSmallParamBudget = 4096;
inline constexpr size_t kLargeParamBudget = 32764;

// What the budget depends on. Versions as CUDA encodes them: 1000 * major + 10 * minor.
struct ParamBudgetFacts {
  int runtime = 0;  // cudaRuntimeGetVersion
  int driver = 0;   // cudaDriverGetVersion
  int nvrtc = 0;    // nvrtcVersion
  int arch = 0;     // compute capability, major * 10 + minor
};

size_t ParamBudgetFor(const ParamBudgetFacts& facts);

// Where a kernel takes an argument struct of `arg_bytes` bytes under a budget of `budget` bytes:
// by value when it fits, else in a table in device memory that the kernel reads through one
// pointer (MXNet passed them by value whatever their size: XLNet's 4,648 bytes overflowed).
// param_bytes is what the launch passes, so it is within the budget for every struct.
struct ParamPlacement {
  bool table = false;
  size_t param_bytes = 0;
};
ParamPlacement PlaceParams(size_t arg_bytes, size_t budget);

}  // namespace weft::gpu
