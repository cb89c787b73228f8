#include "ops/gpu/fusion/param_budget.h"

namespace weft::gpu {
namespace {

constexpr int kLargeParamsVersion = 12010;  // CUDA 12.1
constexpr int kLargeParamsArch = 70;        // Volta

}  // namespace

size_t ParamBudgetFor(const ParamBudgetFacts& f) {
  const bool large = f.runtime >= kLargeParamsVersion && f.driver >= kLargeParamsVersion &&
                     f.nvrtc >= kLargeParamsVersion && f.arch >= kLargeParamsArch;
  return large ? kLargeParamBudget : kSmallParamBudget;
}

ParamPlacement PlaceParams(size_t arg_bytes, size_t budget) {
  const bool table = arg_bytes > budget;
  return {table, table ? sizeof(void*) : arg_bytes};
}

}  // namespace weft::gpu
