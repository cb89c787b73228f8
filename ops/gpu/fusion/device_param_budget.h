// The kernel parameter budget (param_budget.h) of a real device: its facts asked of the CUDA
// runtime, the driver and NVRTC rather than assumed.
//
//   if (plan.bytes > KernelParamBudget(device)) ...   // arguments in a table in device memory
#pragma once

#include <cstddef>
#include <string>

#include "ops/gpu/fusion/param_budget.h"

namespace weft::gpu {

// The facts of `device` (asked once per device and cached; thread-safe). Throws weft::Error for a
// device that is absent.
ParamBudgetFacts QueryParamBudgetFacts(int device);

// ParamBudgetFor(QueryParamBudgetFacts(device)), lowered to WEFT_FUSION_TEST_PARAM_BUDGET bytes
// when that is set: a switch for tests only, so that small groups take the argument table.
size_t KernelParamBudget(int device);

// "32764 bytes (runtime 13.0, driver 13.0, NVRTC 13.0, sm_90)": for messages and test logs.
std::string DescribeParamBudget(int device);

}  // namespace weft::gpu
