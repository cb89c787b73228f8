// Checks of an op's input on the device (engine/gpu/device_error.h): the op's kernels note each
// bad item they find with NoteBadItem (the smallest wins, as the CPU names the first); then
// ReportFirstBad, one thread queued after them on the same stream, writes that item and its value
// into the slot's report in host memory and marks this use done, which the host reads once a
// wait on the op's completion is over. No trap, no assert: the kernels go on, and the CUDA context
// stays usable.
#pragma once

#include "common.cuh"

namespace weft {

constexpr unsigned long long kNoBadItem = ~0ull;

// Item `item` (>= 0) of the checked input is bad.
__device__ inline void NoteBadItem(const GpuErrorSlot& slot, int64 item) {
  atomicMin(slot.first_bad, static_cast<unsigned long long>(item));
}

// One thread: reports the smallest bad item noted for this use (and values[item]), clears the
// note for the slot's next use, then marks the use done. The fences order the report's fields
// before `failed`, and everything before `done`, for the host.
template <typename T>
__global__ void ReportFirstBad(GpuErrorSlot slot, const T* values) {
  if (GlobalThread() != 0) return;
  volatile GpuErrorReport* report = slot.report;
  const unsigned long long item = *slot.first_bad;
  if (item != kNoBadItem) {
    report->item = static_cast<long long>(item);
    report->value = static_cast<double>(ToArith(values[item]));
    __threadfence_system();
    report->failed = slot.ticket;
    *slot.first_bad = kNoBadItem;
  }
  __threadfence_system();
  report->done = slot.ticket;
}

}  // namespace weft
