// The CUDA source of a fused group's kernel (ops/fusion/fused_group.h), generated from the steps'
// functors: each step calls exactly what its unfused GPU kernel calls (kernels/unary.cuh,
// binary.cuh, cast.cuh, on the functors of ops/math), in the same arithmetic type (float for
// float32 and bfloat16, double for float64); values stay in registers between steps. The output
// requests, the pack width, the index type and where the arguments live are baked in; a kernel
// of many steps is written as several device functions (kernel_parts.h) to keep NVVM fast.
//
// The text is canonical: names come from value, field and walk numbers only, never from op or
// node names, and it has no comments; so two groups of the same structure (scalars and sizes
// aside, which are arguments) give the same text and share one compile.
//
//   KernelPlan plan = PlanKernel(group, req, false);
//   std::string error;
//   std::optional<std::string> source = GenerateFusedSource(group, plan, {4, false, 90}, &error);
//   KernelLibrary::Global().TryGet({"fused", *source, kFusedKernelName, {}}, device, &error);
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/kernel_plan.h"

namespace weft::gpu {

// The kernel's name expression in every generated source.
inline constexpr char kFusedKernelName[] = "weft::fused::Kernel";

struct CodegenOptions {
  int width = 1;  // elements per pack of the full-size tensors: 1, or 32 bytes of the widest dtype
  bool table =
      false;  // the kernel takes a pointer to its arguments in device memory, else them by value
  int arch = 90;  // the target, major * 10 + minor: by value as __grid_constant__ from 70 on
  bool bad_code = false;  // tests only: a source NVRTC rejects (the fallback's test)
  size_t part_size =
      256;  // values and stores per device function (kernel_parts.h); tests make it small
};

// The source, or nullopt with the reason in *error (a dtype or kind the generator has no code for).
std::optional<std::string> GenerateFusedSource(const FusedGroup& group, const KernelPlan& plan,
                                               const CodegenOptions& options, std::string* error);

}  // namespace weft::gpu
