// RecordedWork on CUDA (engine/device_backend.h): the work a function queues, captured on a
// stream of its own into a CUDA graph, instantiated once and launched on the replaying op's stream.
//
// The capture stream is non-blocking (work on the legacy stream elsewhere does not invalidate the
// capture) and launches its kernels at once (the graph is their batch); capture is thread-local
// (other workers go on as usual), and relaxed, so that the recording thread may allocate. Each
// thread keeps one such stream per device, made ready by the preparations libraries registered
// (OnNewRecordingStream) before its first capture: what must exist before a capture because making
// it allocates (cuBLAS and cuDNN handles bound to it). Value slots: each is set by two 32-bit
// memset nodes that every root of the captured graph depends on; SetValue changes those nodes in
// the executable graph (cudaGraphExecMemsetNodeSetParams), which leaves the launches already queued
// alone. Instantiation is host work (tens of microseconds per node); a replay is one
// cudaGraphLaunch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/device_backend.h"

namespace weft::gpu {

// Called for each new recording stream, before anything is captured on it. Register at static
// initialization.
using RecordingStreamPrep = void (*)(engine::GpuStream& stream);
void OnNewRecordingStream(RecordingStreamPrep prepare);

// The calling thread's recording stream on `device` (current): non-blocking, kernels launched at
// once, made and prepared on first use. CudaRecordedWork and JoinedLibraryWork
// (engine/gpu/stream_join.h) capture on it.
engine::GpuStream& RecordingStream(int device);

// Ends the capture `stream` is in, after the work being captured failed: frees what was captured
// and clears the capture's error. Never throws.
void DropCapture(cudaStream_t stream);

class CudaRecordedWork final : public engine::RecordedWork {
 public:
  // See DeviceBackend::Record.
  static std::unique_ptr<engine::RecordedWork> Record(const engine::RunContext& ctx, size_t values,
                                                      const engine::RecordFn& record);
  ~CudaRecordedWork() override;  // after every replay's work is done (the caller's duty)

  const uint64_t* values() const override { return values_; }
  void SetValue(size_t k, uint64_t value) override;
  void Replay(const engine::RunContext& ctx) override;

 private:
  CudaRecordedWork(int device, size_t values);
  void AddValueNodes();  // before the captured roots

  const int device_;
  uint64_t* values_ = nullptr;  // device memory, one uint64_t per slot
  std::vector<uint64_t> set_;   // what each slot's nodes write now
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<cudaGraphNode_t> value_nodes_;  // per slot: its low and high word's memset
};

}  // namespace weft::gpu
