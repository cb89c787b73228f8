#include "ops/gpu/fusion/device_param_budget.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/env.h"
#include "core/gpu/cuda_check.h"
#include "core/mutex.h"

namespace weft::gpu {
namespace {

std::string Version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

ParamBudgetFacts QueryParamBudgetFacts(int device) {
  static Mutex mu;
  static std::map<int, ParamBudgetFacts> cache;  // guarded by mu
  MutexLock lock(&mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  ParamBudgetFacts f;
  WEFT_CUDA_CHECK(cudaRuntimeGetVersion(&f.runtime));
  WEFT_CUDA_CHECK(cudaDriverGetVersion(&f.driver));
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) f.nvrtc = 1000 * major + 10 * minor;
  f.arch = ComputeCapability(device);
  return cache.emplace(device, f).first->second;
}

size_t KernelParamBudget(int device) {
  const size_t budget = ParamBudgetFor(QueryParamBudgetFacts(device));
  const int forced =
      GetEnvInt("WEFT_FUSION_TEST_PARAM_BUDGET", 0, 0, static_cast<int>(kLargeParamBudget));
  return forced > 0 ? std::min(budget, static_cast<size_t>(forced)) : budget;
}

std::string DescribeParamBudget(int device) {
  const ParamBudgetFacts f = QueryParamBudgetFacts(device);
  return std::to_string(KernelParamBudget(device)) + " bytes (runtime " + Version(f.runtime) +
         ", driver " + Version(f.driver) + ", NVRTC " + Version(f.nvrtc) + ", sm_" +
         std::to_string(f.arch) + ")";
}

}  // namespace weft::gpu
