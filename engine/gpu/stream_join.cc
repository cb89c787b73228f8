#include "engine/gpu/stream_join.h"

#include <atomic>
#include <iostream>
#include <mutex>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "engine/gpu/recorded_work.h"

namespace weft::gpu {
namespace {

std::atomic<int64_t> runs{0}, instantiations{0}, unjoined{0};

// The library left a fork unjoined: run it on `stream` itself and wait for the whole device.
void RunUnjoined(engine::GpuStream& stream, const JoinedLibraryWork::Call& call) {
  unjoined.fetch_add(1, std::memory_order_relaxed);
  static std::once_flag warned;
  std::call_once(warned, [] {
    std::cerr << "weft: warning: a library call left work on a stream of its own without joining "
                 "it back to the "
                 "caller's stream (cudaStreamEndCapture: cudaErrorStreamCaptureUnjoined); such "
                 "calls run uncaptured, "
                 "each followed by cudaDeviceSynchronize\n";
  });
  call(stream);
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

JoinedLibraryWork::~JoinedLibraryWork() {
  if (execs_.empty()) return;
  DeviceGuard guard(device_);
  for (auto& [path, exec] : execs_) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);  // freed once a launch in flight is done
  }
}

void JoinedLibraryWork::Run(engine::GpuStream& stream, uint32_t path, const Call& call) {
  if (stream.recording()) return call(stream);
  device_ = stream.device();
  engine::GpuStream& capture = RecordingStream(stream.device());
  // Relaxed, as CudaRecordedWork::Record: a library may allocate while it is captured.
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(capture.handle(), cudaStreamCaptureModeRelaxed));
  try {
    call(capture);
  } catch (...) {
    DropCapture(capture.handle());
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(capture.handle(), &graph);
  if (ended == cudaErrorStreamCaptureUnjoined) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    return RunUnjoined(stream, call);
  }
  WEFT_CUDA_CHECK(ended);
  try {
    Launch(stream, ExecFor(path), graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  cudaGraphDestroy(graph);
  runs.fetch_add(1, std::memory_order_relaxed);
}

cudaGraphExec_t& JoinedLibraryWork::ExecFor(uint32_t path) {
  for (auto& [p, exec] : execs_) {
    if (p == path) return exec;
  }
  return execs_.emplace_back(path, nullptr).second;
}

// Updates `exec` to `graph` (the launches already queued keep what they had), or instantiates
// it anew when the update is refused (a changed topology), then launches it on `stream`.
void JoinedLibraryWork::Launch(engine::GpuStream& stream, cudaGraphExec_t& exec,
                               cudaGraph_t graph) {
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
      cudaGetLastError();
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
  }
  if (exec == nullptr) {
    WEFT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    instantiations.fetch_add(1, std::memory_order_relaxed);
  }
  stream.Library([&](cudaStream_t s) { WEFT_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
}

JoinCounts Joins() {
  return {runs.load(std::memory_order_relaxed), instantiations.load(std::memory_order_relaxed),
          unjoined.load(std::memory_order_relaxed)};
}

}  // namespace weft::gpu
