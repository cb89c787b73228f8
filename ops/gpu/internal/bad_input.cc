#include "ops/gpu/internal/bad_input.h"

#include <cstddef>
#include <utility>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"

namespace weft::gpu {
namespace {

// The kernels' structs are the engine's, field for field.
static_assert(sizeof(GpuErrorReport) == sizeof(DeviceErrorReport));
static_assert(offsetof(GpuErrorReport, failed) == offsetof(DeviceErrorReport, failed));
static_assert(offsetof(GpuErrorReport, done) == offsetof(DeviceErrorReport, done));
static_assert(offsetof(GpuErrorReport, item) == offsetof(DeviceErrorReport, item));
static_assert(offsetof(GpuErrorReport, value) == offsetof(DeviceErrorReport, value));
static_assert(sizeof(GpuErrorSlot) == sizeof(DeviceErrorSlot));
static_assert(offsetof(GpuErrorSlot, first_bad) == offsetof(DeviceErrorSlot, first_bad));
static_assert(offsetof(GpuErrorSlot, report) == offsetof(DeviceErrorSlot, report));
static_assert(offsetof(GpuErrorSlot, ticket) == offsetof(DeviceErrorSlot, ticket));

GpuErrorSlot KernelSlot(const DeviceErrorSlot& s) {
  return GpuErrorSlot{s.first_bad, reinterpret_cast<GpuErrorReport*>(s.report), s.ticket};
}

}  // namespace

BadItems::BadItems(const OpContext& ctx, DeviceErrorMessage message)
    : ctx_(ctx), slot_(KernelSlot(StreamOf(ctx).ErrorSlot(std::move(message)))) {}

void BadItems::Report(const TensorView& values) const {
  static constexpr DType kValueTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                          DType::kFloat16, DType::kInt32,   DType::kInt64};
  const std::string t = KernelType("a check of bad input", kValueTypes, {&values, 1}, {});
  Launch(ctx_, "device_error.cuh", Instance("weft::ReportFirstBad", {t}), 1, slot_, values.raw());
}

}  // namespace weft::gpu
