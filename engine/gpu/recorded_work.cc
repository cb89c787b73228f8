#include "engine/gpu/recorded_work.h"

#include <exception>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/no_destructor.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {
namespace {

// The 32-bit word `word` (0: low, 1: high) of slot `k`, as a memset node writes it.
cudaMemsetParams WordParams(uint64_t* values, size_t k, int word, uint64_t value) {
  cudaMemsetParams p{};
  p.dst = reinterpret_cast<uint32_t*>(values + k) + word;
  p.value = static_cast<unsigned>(value >> (32 * word));
  p.elementSize = 4;
  p.width = 1;
  p.height = 1;
  return p;
}

// Drops the capture `stream` is in, after `record` failed with `why`.
[[noreturn]] void AbandonCapture(cudaStream_t stream, const std::string& why) {
  DropCapture(stream);
  WEFT_THROW("recording the work into a CUDA graph failed: " << why);
}

std::vector<RecordingStreamPrep>& Preparations() {
  static NoDestructor<std::vector<RecordingStreamPrep>> preps;  // filled at static initialization
  return *preps;
}

}  // namespace

void OnNewRecordingStream(RecordingStreamPrep prepare) { Preparations().push_back(prepare); }

void DropCapture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial != nullptr) cudaGraphDestroy(partial);
  cudaGetLastError();  // the capture's error is reported here, not by the next CUDA call
}

engine::GpuStream& RecordingStream(int device) {
  thread_local std::vector<std::pair<int, std::unique_ptr<engine::GpuStream>>> streams;
  for (auto& [d, s] : streams) {
    if (d == device) return *s;
  }
  auto stream = std::make_unique<engine::GpuStream>(
      device, engine::GpuStream::Options{.blocking = false, .recording = true});
  for (RecordingStreamPrep prepare : Preparations()) prepare(*stream);
  streams.emplace_back(device, std::move(stream));
  return *streams.back().second;
}

CudaRecordedWork::CudaRecordedWork(int device, size_t values) : device_(device), set_(values, 0) {
  if (values > 0) WEFT_CUDA_CHECK(cudaMalloc(&values_, values * sizeof(uint64_t)));
}

CudaRecordedWork::~CudaRecordedWork() {
  DeviceGuard guard(device_);
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  if (values_ != nullptr) cudaFree(values_);
}

std::unique_ptr<engine::RecordedWork> CudaRecordedWork::Record(const engine::RunContext& ctx,
                                                               size_t values,
                                                               const engine::RecordFn& record) {
  DeviceGuard guard(ctx.device.id);
  std::unique_ptr<CudaRecordedWork> work(new CudaRecordedWork(ctx.device.id, values));
  engine::GpuStream& stream = RecordingStream(ctx.device.id);
  // Relaxed: the recording thread may allocate (a workspace grown for the recorded ops: the
  // allocation is real and kept, Workspace::ForRecording), which the stricter modes forbid.
  WEFT_CUDA_CHECK(cudaStreamBeginCapture(stream.handle(), cudaStreamCaptureModeRelaxed));
  try {
    record(engine::RunContext{ctx.device, &stream, ctx.worker}, work->values_);
  } catch (const std::exception& e) {
    AbandonCapture(stream.handle(), e.what());
  }
  const cudaError_t ended = cudaStreamEndCapture(stream.handle(), &work->graph_);
  if (ended != cudaSuccess) {
    cudaGetLastError();
    WEFT_THROW("recording the work into a CUDA graph failed: cudaStreamEndCapture: "
               << cudaGetErrorName(ended) << ": " << cudaGetErrorString(ended));
  }
  work->AddValueNodes();
  WEFT_CUDA_CHECK(cudaGraphInstantiate(&work->exec_, work->graph_, 0));
  return work;
}

void CudaRecordedWork::AddValueNodes() {
  size_t count = 0;
  WEFT_CUDA_CHECK(cudaGraphGetRootNodes(graph_, nullptr, &count));
  std::vector<cudaGraphNode_t> roots(count);
  WEFT_CUDA_CHECK(cudaGraphGetRootNodes(graph_, roots.data(), &count));
  for (size_t k = 0; k < set_.size(); ++k) {
    for (int word = 0; word < 2; ++word) {
      const cudaMemsetParams p = WordParams(values_, k, word, 0);
      cudaGraphNode_t node = nullptr;
      WEFT_CUDA_CHECK(cudaGraphAddMemsetNode(&node, graph_, nullptr, 0, &p));
      for (cudaGraphNode_t root : roots)
        WEFT_CUDA_CHECK(cudaGraphAddDependencies(graph_, &node, &root, nullptr, 1));
      value_nodes_.push_back(node);
    }
  }
}

void CudaRecordedWork::SetValue(size_t k, uint64_t value) {
  WEFT_CHECK_LT(k, set_.size()) << "a value slot of recorded work";
  if (set_[k] == value) return;
  DeviceGuard guard(device_);
  for (int word = 0; word < 2; ++word) {
    const cudaMemsetParams p = WordParams(values_, k, word, value);
    WEFT_CUDA_CHECK(cudaGraphExecMemsetNodeSetParams(exec_, value_nodes_[2 * k + word], &p));
  }
  set_[k] = value;
}

void CudaRecordedWork::Replay(const engine::RunContext& ctx) {
  ctx.stream->Library([&](cudaStream_t s) { WEFT_CUDA_CHECK(cudaGraphLaunch(exec_, s)); });
}

}  // namespace weft::gpu
