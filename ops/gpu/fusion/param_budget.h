// How many bytes of parameters a kernel launched on a device may take: a property of the device
// and of the toolkit, asked of the CUDA runtime, the driver and NVRTC rather than assumed. CUDA
// 12.1 raised the limit from 4,096 bytes to 32,764 on compute capability 7.0 and newer; it holds
// where the runtime, the driver (which launches) and NVRTC (which compiles) are all 12.1 or newer.
// There is no device attribute for it (cudaDeviceGetAttribute and cudaDeviceProp have none).
//
//   if (plan.bytes > KernelParamBudget(device)) ...   // arguments in a table in device memory
#pragma once

#include <cstddef>
#include <string>

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

// The facts of `device` (asked once per device and cached; thread-safe). Throws weft::Error for a
// device that is absent.
ParamBudgetFacts QueryParamBudgetFacts(int device);

// ParamBudgetFor(QueryParamBudgetFacts(device)), lowered to WEFT_FUSION_TEST_PARAM_BUDGET bytes
// when that is set: a switch for tests only, so that small groups take the argument table.
size_t KernelParamBudget(int device);

// "32764 bytes (runtime 13.0, driver 13.0, NVRTC 13.0, sm_90)": for messages and test logs.
std::string DescribeParamBudget(int device);

}  // namespace weft::gpu
