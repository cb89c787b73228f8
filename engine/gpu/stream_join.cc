#include "engine/gpu/stream_join.h"

#include "core/gpu/cuda_check.h"

namespace weft::gpu {

// The event is recorded on the legacy stream without flushing other streams' batches: the join
// is after the library's auxiliary streams, and kernels still batched elsewhere are not the op's.
void JoinLibraryStreams(engine::GpuStream& stream) {
  const int device = stream.device();
  // One event per thread and device: cudaStreamWaitEvent takes the event's state when it is
  // called, so re-recording it on the next join is safe. Never destroyed (process lifetime).
  constexpr int kMaxDevices = 16;
  thread_local cudaEvent_t events[kMaxDevices] = {};
  WEFT_CHECK(device >= 0 && device < kMaxDevices)
      << "JoinLibraryStreams: expected a GPU id below " << kMaxDevices << ", found " << device;
  cudaEvent_t& event = events[device];
  if (event == nullptr) WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  WEFT_CUDA_CHECK(cudaEventRecord(event, cudaStreamLegacy));
  stream.Wait(event);
}

}  // namespace weft::gpu
