// A fused kernel's live steps in parts, each generated as a device function of its own when there
// is more than one. NVVM's optimizations grow faster than linearly with a function's size: one
// function for a group of 3,000 outputs took minutes to compile, in parts of 256 statements
// seconds (CodegenOptions::part_size). A part's size counts the values its steps compute and the
// outputs they store (a reshape computes nothing), per lane.
// Each part knows the operands (step_code.h) it reads from before it (its ins, passed by
// reference) and those it defines for the parts after it (its outs, which its caller declares).
//
//   std::vector<KernelPart> parts = SplitIntoParts(group, plan, code);   // one part: inline code
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/kernel_plan.h"
#include "ops/gpu/fusion/step_code.h"

namespace weft::gpu {

struct KernelPart {
  std::vector<uint32_t> steps;  // live steps, in order
  std::vector<Operand> ins;   // read here, defined before (inputs, broadcast reads, earlier parts)
  std::vector<Operand> outs;  // defined here, read by a later part
};

// Consecutive runs of live steps of at most `part_size` values and stores each (a step bigger
// than that alone); ins and outs are filled when there are two parts or more.
std::vector<KernelPart> SplitIntoParts(const FusedGroup& group, const KernelPlan& plan,
                                       const StepCode& code, size_t part_size);

}  // namespace weft::gpu
