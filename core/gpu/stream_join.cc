#include "core/gpu/stream_join.h"

#include "core/gpu/cuda_check.h"

namespace weft::gpu {

void JoinLibraryStreams(cudaStream_t stream) {
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  // One event per thread and device: cudaStreamWaitEvent takes the event's state when it is
  // called, so re-recording it on the next join is safe. Never destroyed (process lifetime).
  constexpr int kMaxDevices = 16;
  thread_local cudaEvent_t events[kMaxDevices] = {};
  WEFT_CHECK_LT(device, kMaxDevices) << "JoinLibraryStreams: GPU id";
  cudaEvent_t& event = events[device];
  if (event == nullptr) WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  WEFT_CUDA_CHECK(cudaEventRecord(event, cudaStreamLegacy));
  WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
}

}  // namespace weft::gpu
